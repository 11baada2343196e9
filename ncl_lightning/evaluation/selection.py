"""Feature selection by expected activation (NCL paper, Table 1 and Figure 10).

NCL features are sparse and each dimension is used by a few semantic clusters, so the
dimensions with the largest expected activation ``EA_i = mean_x ẑ_i(x)`` on the training
set carry most of the information: keeping the top-k of them loses little accuracy,
while for dense CL features the ranking means little (Wang et al., ICLR 2024, Sec. 5.3).

For every ``k`` in ``ks`` and every rule in ``rules`` (``RULES``), this module reports
on the selected dims of the projector features ``z``:

* ``linear_acc``: a linear probe trained on the training features, tested on the test split;
* ``retrieval_p@10``: cosine retrieval precision@10 on the test split ("mAP@10");
* ``transfer_acc``: a linear probe on another labelled dataset (``transfer``).

The rules (``RULES``):

* ``ea``: the top-k dims by EA of the features ``z`` themselves;
* ``ea_no_relu``: the top-k dims by EA of the projector outputs *before* the non-negative
  map (NCL paper, Table 1, "EA w/o ReLU"), i.e. of ``p`` where ``z = ReLU(p)``; the
  selected dims are then evaluated on ``z`` like the others. For a method without a map
  (CL) or for ``space: h`` the pre-map features are ``z`` itself and the rule equals ``ea``.
  For BayesNCL it ranks the projector outputs before the map and the gate;
* ``random``: a seeded random k (the baseline).

Run with ``ncl-cli test``. Keys: ``test/selection/{rule}/k{k}/{metric}``; files in the run
folder: ``feature_selection.json``, ``feature_selection.md``, ``accuracy_vs_k.png``.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor

from ncl_lightning.callbacks.schedule import run_dir
from ncl_lightning.checkpoints.load import load_method
from ncl_lightning.data.base import MultiViewDataModule
from ncl_lightning.evaluation.features import extract_features, probe_accuracy
from ncl_lightning.evaluation.linear import z_width
from ncl_lightning.foundation.errors import ConfigError, UsageError
from ncl_lightning.foundation.protocols import CleanData, require_extra
from ncl_lightning.foundation.validation import (
    check_at_least,
    check_choice,
    check_int,
    check_positive,
    check_range,
)
from ncl_lightning.methods.classifier import first_view
from ncl_lightning.methods.record import write_record
from ncl_lightning.metrics.functional import (
    expected_activation,
    retrieval_precision,
    select_by_expected_activation,
)
from ncl_lightning.nn.gather import gather_uneven
from ncl_lightning.plot.pictures import accuracy_vs_k

RULES = ("ea", "ea_no_relu", "random")
"""Selection rules by name: EA of ``z``, EA of the pre-map projector outputs, random."""

DEFAULT_RULES = ("ea", "random")
"""The rules [`FeatureSelection`][ncl_lightning.evaluation.FeatureSelection] runs unless
``rules`` says otherwise (each rule adds a linear probe per ``k``)."""


def default_ks(d: int) -> list[int]:
    """Powers of two from 8 up to ``d``, and ``d`` itself."""
    ks = [2**i for i in range(3, d.bit_length()) if 2**i < d]
    return [*ks, d]


def select_dims(
    ea: Tensor, k: int, rule: str, seed: int, pre_map_ea: Tensor | None = None
) -> Tensor:
    """Indices ``[k]`` of the kept dims under ``rule``: ``ea`` (top-k of the expected
    activations ``ea`` ``[d]`` of ``z``), ``ea_no_relu`` (top-k of ``pre_map_ea`` ``[d]``,
    those before the non-negative map) or ``random`` (k of the ``d``, seeded by ``seed``)."""
    check_choice("rule", rule, RULES)
    if rule == "ea":
        return select_by_expected_activation(ea, k)
    if rule == "ea_no_relu":
        if pre_map_ea is None:
            raise UsageError("rule ea_no_relu needs pre_map_ea: the EA before the map")
        return select_by_expected_activation(pre_map_ea, k)
    gen = torch.Generator().manual_seed(seed)
    return torch.randperm(ea.shape[0], generator=gen)[:k].to(ea.device)


class FeatureSelection(L.LightningModule):
    """Expected-activation feature selection of a pretrained method's features.

    Args:
        checkpoint: Pretrained CL/NCL/BayesNCL checkpoint (the whole method is rebuilt).
        num_classes: Classes of the evaluated data (CLI-linked).
        batch_size: Unused (CLI-linked).
        ks: Numbers of kept dims to sweep (default: powers of two up to ``d``, and ``d``).
        space: Features to select from: ``z`` (projector, paper) or ``h`` (encoder).
        rules: Selection rules to compare (names of ``RULES``; default ``ea`` and
            ``random``; add ``ea_no_relu`` for NCL Table 1's "EA w/o ReLU" row).
        seed: Seed of the random-k baseline.
        probe_epochs: Epochs of each linear probe on fixed features.
        probe_lr: Peak learning rate of those probes.
        retrieval_k: Neighbours of the retrieval precision.
        transfer: A labelled DataModule (train/val splits) for the transfer probe.
    """

    def __init__(
        self,
        checkpoint: str,
        num_classes: int = 0,
        batch_size: int | None = None,
        ks: list[int] | None = None,
        space: Literal["z", "h"] = "z",
        rules: list[str] | None = None,
        seed: int = 0,
        probe_epochs: int = 100,
        probe_lr: float = 0.1,
        retrieval_k: int = 10,
        transfer: MultiViewDataModule | None = None,
    ) -> None:
        super().__init__()
        check_at_least("num_classes", num_classes, 1)
        check_choice("space", space, ("z", "h"))
        check_rules(rules)
        check_at_least("probe_epochs", probe_epochs, 1)
        check_positive("probe_lr", probe_lr)
        check_at_least("retrieval_k", retrieval_k, 1)
        self.save_hyperparameters(ignore=["transfer"])
        self.method = load_method(checkpoint).requires_grad_(False)
        # Check ks against the feature width now, before any image is encoded.
        width = z_width(self.method, checkpoint) if space == "z" else self.method.backbone.out_dim
        if ks is not None:
            check_ks(ks, width)
        self.transfer = transfer
        self._train: tuple[Tensor, Tensor] | None = None
        self._pre_map_ea: Tensor | None = None  # EA [d] before the map (rule ea_no_relu)
        self._test: list[tuple[Tensor, Tensor]] = []
        self.results: dict[str, dict[int, dict[str, float]]] = {}

    def backbone_spec(self) -> dict[str, Any] | None:
        return self.method.backbone_spec()

    @property
    def rules(self) -> tuple[str, ...]:
        """The rules this run compares."""
        return tuple(self.hparams.get("rules") or DEFAULT_RULES)

    def encode(self, x: Tensor) -> Tensor:
        """The selected space's features ``[B, d]`` of images ``[B, C, H, W]``."""
        return getattr(self.method.encode(x), self.hparams.space)

    def encode_with_pre_map(self, x: Tensor) -> Tensor:
        """``[z, p]`` ``[B, 2d]``: the selected features and the same features before the
        non-negative map (the projector output ``p`` for ``space: z``; ``z`` itself where
        there is no map)."""
        encoded = self.method.encode(x)
        z = getattr(encoded, self.hparams.space)
        projector = getattr(self.method, "projector", None)
        pre = projector(encoded.h) if self.hparams.space == "z" and projector is not None else z
        return torch.cat([z, pre], dim=1)

    def _clean(self, dm: object, split: str, pre_map: bool = False) -> tuple[Tensor, Tensor]:
        dm = require_extra(dm, CleanData, "FeatureSelection", "clean_dataloader()", "data")
        loader = dm.clean_dataloader(split, self.global_rank, self.trainer.world_size)
        encode = self.encode_with_pre_map if pre_map else self.encode
        return extract_features(encode, loader, self.device)

    def on_test_start(self) -> None:
        self._pre_map_ea = None
        if "ea_no_relu" in self.rules:  # one pass of the encoder for both
            both, y = self._clean(self.trainer.datamodule, "train", pre_map=True)
            z, pre_map = both.chunk(2, dim=1)
            self._train, self._pre_map_ea = (z, y), expected_activation(pre_map)
        else:
            self._train = self._clean(self.trainer.datamodule, "train")
        self._test = []

    def test_step(self, batch: Any, batch_idx: int) -> None:
        x, y = first_view(batch)
        self._test.append((self.encode(x).float(), y))

    def on_test_epoch_end(self) -> None:
        test = (
            gather_uneven(torch.cat([z for z, _ in self._test])),
            gather_uneven(torch.cat([y for _, y in self._test])),
        )
        transfer = None
        if self.transfer is not None:
            transfer = (self._clean(self.transfer, "train"), self._clean(self.transfer, "val"))
        d = self._train[0].shape[1]
        ks = self.hparams.ks or default_ks(d)
        ea = expected_activation(self._train[0])
        fit = {"epochs": self.hparams.probe_epochs, "lr": self.hparams.probe_lr}
        self.results = {rule: {} for rule in self.rules}
        for rule in self.rules:
            for k in ks:
                dims = select_dims(ea, k, rule, self.hparams.seed, self._pre_map_ea)
                row = self.evaluate_dims(dims, test, transfer, fit)
                self.results[rule][k] = row
                for name, value in row.items():
                    # every rank evaluated the same gathered features: the mean over ranks
                    # is the value itself (one all-reduce per key, once per test)
                    self.log(f"test/selection/{rule}/k{k}/{name}", value, sync_dist=True)
        self._write()

    def evaluate_dims(
        self,
        dims: Tensor,
        test: tuple[Tensor, Tensor],
        transfer: tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]] | None,
        fit: dict[str, Any],
    ) -> dict[str, float]:
        """Linear accuracy, retrieval precision and transfer accuracy on ``dims``."""
        train_x, train_y = self._train
        row = {
            "linear_acc": probe_accuracy(
                (train_x[:, dims], train_y), (test[0][:, dims], test[1]),
                self.hparams.num_classes, **fit,
            ),
            f"retrieval_p@{self.hparams.retrieval_k}": retrieval_precision(
                test[0], test[1], k=self.hparams.retrieval_k, dims=dims
            ).item(),
        }  # fmt: skip
        if transfer is not None:
            (tx, ty), (vx, vy) = transfer
            row["transfer_acc"] = probe_accuracy(
                (tx[:, dims], ty), (vx[:, dims], vy), self.transfer.num_classes, **fit
            )
        return row

    def _write(self) -> None:
        folder = run_dir(self.trainer)
        if not self.trainer.is_global_zero:
            return
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "feature_selection.json").write_text(json.dumps(self.results, indent=2))
        table = selection_table(self.results)
        (folder / "feature_selection.md").write_text(table + "\n")
        curves = {
            f"{rule} top-k": (list(rows), [r["linear_acc"] for r in rows.values()])
            for rule, rows in self.results.items()
        }
        accuracy_vs_k(curves, folder / "accuracy_vs_k.png", "Linear accuracy vs selected dims")
        rank_zero_info(f"Feature selection ({folder}):\n{table}")

    def configure_optimizers(self) -> None:
        return None

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """The checkpoint record ([`write_record`][ncl_lightning.methods.record.write_record])."""
        write_record(self, checkpoint)


def selection_table(results: dict[str, dict[int, dict[str, float]]]) -> str:
    """Markdown table: one row per (rule, k), one column per metric (percent)."""
    metrics = sorted({m for rows in results.values() for row in rows.values() for m in row})
    lines = ["| rule | k | " + " | ".join(metrics) + " |", "|---|---|" + "---|" * len(metrics)]
    for rule, rows in results.items():
        for k, row in rows.items():
            cells = " | ".join(f"{100 * row[m]:.2f}" if m in row else "" for m in metrics)
            lines.append(f"| {rule} | {k} | {cells} |")
    return "\n".join(lines)


def check_rules(rules: list[str] | None) -> None:
    """``rules`` is ``None`` (the default rules) or a non-empty list of distinct
    ``RULES`` names."""
    if rules is None:
        return
    if not rules or len(set(rules)) != len(rules):
        raise ConfigError(
            f"rules must list distinct rules of {list(RULES)}, got {rules}", key="rules"
        )
    for rule in rules:
        check_choice("rules", rule, RULES)


def check_ks(ks: list[int], width: int) -> None:
    """``ks`` is a non-empty list of integers in ``[1, width]`` (the features' width)."""
    if not ks:
        raise ConfigError("ks must list at least one k, got []", key="ks")
    for k in ks:
        check_int("ks", k, 1)
        check_range("ks", k, 1, width)
