"""``TopActivations``: the pictures people look at to read the features.

For the dimensions with the highest expected activation (EA), a row of the validation
images that activate each most (NCL paper, Wang et al., ICLR 2024, Figure 1); a heat map of
feature values for random samples; the dimension-by-dimension correlation matrix; and the
sorted EA curve. PNG files go to ``<run dir>/pictures/`` (beside the checkpoints); loggers
that show images (W&B) also get them.
"""

from __future__ import annotations

from itertools import islice
from pathlib import Path
from typing import Literal

import lightning as L
import numpy as np
import torch
from torch import Tensor

from ncl_lightning.callbacks.schedule import batch_limit, epoch_due, run_dir
from ncl_lightning.foundation.protocols import PictureData, require_extra
from ncl_lightning.foundation.validation import check_choice, check_int
from ncl_lightning.metrics.functional import (
    expected_activation,
    l2_normalize_rows,
    select_by_expected_activation,
)
from ncl_lightning.plot import pictures


def _picture_data(trainer: L.Trainer) -> PictureData:
    """The trainer's DataModule if it has images to draw; one-line ``ConfigError`` if not."""
    return require_extra(
        trainer.datamodule, PictureData, "TopActivations", "val_dataset, test_dataset and "
        "augmentation (images to draw)", "trainer.callbacks",
    )  # fmt: skip


class TopActivations(L.Callback):
    """Draw top-activated images, feature heat map, correlation matrix and EA curve.

    Runs on rank 0 only, over the DataModule's clean ``val_dataset`` (``test_dataset`` at
    test) in order, so row images are found by index. EA here is measured on those
    evaluation features.

    Args:
        every_n_epochs: Draw at the validation of every n-th epoch (and the last one).
        space: ``z`` (objective features) or ``h`` (backbone output).
        num_dims: Rows: dimensions with the highest EA.
        num_images: Images per row.
        heatmap_samples: Random samples in the heat map.
        max_samples: Cap on the evaluation images encoded (None: all; `fast_dev_run` and
            `limit_val_batches` / `limit_test_batches` bound the batches read as well).
        cell: Pixel side of each image in the grid.
        seed: Seed of the heat map's sample choice.
    """

    def __init__(
        self,
        every_n_epochs: int = 10,
        space: Literal["z", "h"] = "z",
        num_dims: int = 10,
        num_images: int = 10,
        heatmap_samples: int = 64,
        max_samples: int | None = 10_000,
        cell: int = 64,
        seed: int = 0,
    ) -> None:
        for name, value in (("every_n_epochs", every_n_epochs), ("num_dims", num_dims),
                            ("num_images", num_images), ("heatmap_samples", heatmap_samples),
                            ("cell", cell)):  # fmt: skip
            check_int(name, value)
        check_choice("space", space, ("z", "h"))
        self.every_n_epochs = every_n_epochs
        self.space = space
        self.num_dims = num_dims
        self.num_images = num_images
        self.heatmap_samples = heatmap_samples
        self.max_samples = max_samples
        self.cell = cell
        self.seed = seed
        self.last_paths: dict[str, Path] = {}

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if epoch_due(trainer, self.every_n_epochs):
            self.draw(trainer, pl_module, "val")

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.draw(trainer, pl_module, "test")

    @torch.no_grad()
    def _encode(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> Tensor:
        datamodule = _picture_data(trainer)
        loader = datamodule.val_dataloader() if stage == "val" else datamodule.test_dataloader()
        most = batch_limit(trainer, stage, loader)  # fast_dev_run, limit_*_batches
        features, seen = [], 0
        for x, _ in islice(loader, most):
            features.append(
                getattr(pl_module.encode(x.to(pl_module.device)), self.space).float().cpu()
            )
            seen += len(x)
            if self.max_samples is not None and seen >= self.max_samples:
                break
        return torch.cat(features)[: self.max_samples]

    def draw(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> dict[str, Path]:
        """Encode the split, save the four pictures and hand them to image loggers."""
        out = run_dir(trainer) / "pictures"  # on every rank: trainer.log_dir is a collective
        if not trainer.is_global_zero:
            return {}
        datamodule = _picture_data(trainer)
        dataset = datamodule.val_dataset if stage == "val" else datamodule.test_dataset
        z = l2_normalize_rows(self._encode(trainer, pl_module, stage))
        n, d = z.shape
        ea = expected_activation(z)
        dims = select_by_expected_activation(ea, min(self.num_dims, d))
        k = min(self.num_images, n)
        top = z[:, dims].topk(k, dim=0).indices.T  # [rows, k] dataset indices
        images = torch.stack([torch.stack([dataset[int(i)][0] for i in row]) for row in top])
        aug = datamodule.augmentation
        pixels = pictures.to_uint8(images.flatten(0, 1), aug.mean, aug.std)
        pixels = pixels.reshape(len(dims), k, *pixels.shape[1:])
        labels = [f"dim {int(i)}\nEA {float(ea[i]):.3f}" for i in dims]

        out.mkdir(parents=True, exist_ok=True)
        tag = f"{stage}_{self.space}_epoch{trainer.current_epoch:03d}"
        order = ea.argsort(descending=True)
        g = torch.Generator().manual_seed(self.seed)
        sample = torch.randperm(n, generator=g)[: self.heatmap_samples]
        paths = {
            "top_activations": out / f"{tag}_top_activations.png",
            "heatmap": pictures.heatmap(
                z[sample][:, order],
                out / f"{tag}_heatmap.png",
                f"{self.space} of {len(sample)} random {stage} images",
                "dimension (by EA)",
                "sample",
            ),
            "correlation": pictures.correlation(
                z[:, order],
                out / f"{tag}_correlation.png",
                f"{self.space}: correlation of dimensions (by EA)",
            ),
            "ea_curve": pictures.ea_curve(
                ea, out / f"{tag}_ea_curve.png", f"{self.space}: expected activation"
            ),
        }
        pictures.activation_grid(np.asarray(pixels), labels, self.cell).save(
            paths["top_activations"]
        )
        for logger in trainer.loggers:
            if hasattr(logger, "log_image"):
                for name, path in paths.items():
                    logger.log_image(
                        key=f"{stage}/{self.space}/{name}",
                        images=[str(path)],
                        step=trainer.global_step,
                    )
        self.last_paths = paths
        return paths
