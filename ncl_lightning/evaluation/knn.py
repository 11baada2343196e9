"""Offline weighted kNN classification with a pretrained encoder (Wu et al., 2018).

The bank holds the clean (non-augmented) training-split features of the encoder output
``h``, computed once per evaluation from every rank's shard and gathered; queries are
the evaluated split. Run with ``ncl-cli test`` (or ``validate``); nothing is trained.
Metrics: ``{stage}/offline_knn/acc_top1`` and ``.../acc_top5``.
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor

from ncl_lightning.checkpoints.load import load_backbone
from ncl_lightning.evaluation.features import extract_features
from ncl_lightning.foundation.protocols import CleanData, require_extra
from ncl_lightning.foundation.validation import check_at_least, check_positive
from ncl_lightning.methods.classifier import accuracy_metrics, first_view
from ncl_lightning.methods.record import write_record
from ncl_lightning.methods.ssl import Encoded
from ncl_lightning.metrics.functional.knn import weighted_knn_predict


class KNNClassifier(L.LightningModule):
    """Cosine-similarity weighted kNN on the frozen encoder of a checkpoint.

    Args:
        checkpoint: Pretrained checkpoint (any method of the package).
        num_classes: Number of classes (CLI-linked from the DataModule).
        batch_size: Unused (CLI-linked; kept so every module takes the same links).
        k: Neighbours: 200, as Wu et al. (2018) (the NCL paper reports no kNN number;
            solo-learn's online kNN, which its release runs, defaults to 20); clipped to the
            bank size.
        temperature: Temperature of the neighbour weights ``exp(cos / T)``.

    Example:
        ``ncl-cli test --config configs/eval/cifar10_knn.yaml --model.checkpoint last.ckpt``
    """

    label = "offline_knn"

    def __init__(
        self,
        checkpoint: str,
        num_classes: int = 0,
        batch_size: int | None = None,
        k: int = 200,
        temperature: float = 0.07,
    ) -> None:
        super().__init__()
        check_at_least("num_classes", num_classes, 1)
        check_at_least("k", k, 1)
        check_positive("temperature", temperature)
        self.save_hyperparameters()
        self.backbone = load_backbone(checkpoint).eval().requires_grad_(False)
        self.metrics = torch.nn.ModuleDict(
            {
                s: accuracy_metrics(num_classes).clone(prefix=f"{s}/{self.label}/")
                for s in ("val", "test")
            }
        )
        self._bank: tuple[Tensor, Tensor] | None = None

    def encode(self, x: Tensor) -> Tensor:
        """L2-normalised encoder features ``[B, D]``."""
        return F.normalize(self.backbone(x).float(), dim=1)

    def build_bank(self) -> None:
        """Encode the clean training split (sharded over ranks) into the bank."""
        dm = require_extra(
            self.trainer.datamodule, CleanData, "KNNClassifier", "clean_train_dataloader()", "data"
        )
        loader = dm.clean_train_dataloader(self.global_rank, self.trainer.world_size)
        self._bank = extract_features(self.encode, loader, self.device)

    def on_validation_start(self) -> None:
        self.build_bank()

    def on_test_start(self) -> None:
        self.build_bank()

    def _evaluate(self, batch: Any, stage: str) -> Encoded:
        x, y = first_view(batch)
        h = self.backbone(x)
        bank, labels = self._bank
        scores = weighted_knn_predict(
            F.normalize(h.float(), dim=1), bank, labels, self.hparams.num_classes, self.hparams.k,
            self.hparams.temperature,
        )  # fmt: skip
        self.metrics[stage].update(scores, y)
        self.log_dict(self.metrics[stage], on_epoch=True)
        return Encoded(h=h, z=h)

    def validation_step(self, batch: Any, batch_idx: int) -> Encoded:
        return self._evaluate(batch, "val")

    def test_step(self, batch: Any, batch_idx: int) -> Encoded:
        return self._evaluate(batch, "test")

    def configure_optimizers(self) -> None:
        return None

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """The checkpoint record ([`write_record`][ncl_lightning.methods.record.write_record])."""
        write_record(self, checkpoint)
