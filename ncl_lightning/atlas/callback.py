"""``FeatureAtlas``: write the atlas of the model being tested (``ncl-cli test``).

Every rank profiles its shard of the test split and the metrics reduce over the ranks
([`collect`][ncl_lightning.atlas.collect]); rank 0 then writes the image strips and the page, and
hands them to W&B (an HTML panel and an artifact) when W&B is a logger.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import lightning as L
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.utilities import rank_zero_info

from ncl_lightning.atlas.collect import SplitProfile, check_atlas_data, check_encoder, profile_split
from ncl_lightning.atlas.images import IMAGE_FORMATS, ImageReader, upscale_factor, write_strips
from ncl_lightning.atlas.model import model_entry, strip_indices
from ncl_lightning.atlas.site import single_file_page, write_page
from ncl_lightning.callbacks.schedule import batch_limit, class_names, run_dir
from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.validation import check_at_least, check_choice
from ncl_lightning.runtime.loggers import log_site

PANEL_DIMS = 64  # dimensions whose images the W&B HTML panel carries inline


def accuracy_of(metrics: dict[str, Any], stage: str) -> float | None:
    """Top-1 accuracy the module logged on ``stage``: the online probe's
    (``test/online_acc``) or a classifier head's (``test/<label>/acc_top1``)."""
    for key, value in metrics.items():
        if key == f"{stage}/online_acc" or (
            key.startswith(f"{stage}/") and key.endswith("/acc_top1")
        ):
            return float(value)
    return None


class FeatureAtlas(L.Callback):
    """Browse every feature of the tested model: a static site per test run.

    Writes ``<out>/index.html`` (open it from disk; no server, no network) and
    ``<out>/img/<key>/<dim>.<ext>``: one card per dimension with its expected activation,
    activation frequency, semantic consistency, majority class, class histogram, top
    activating test images, SEPIN and (BayesNCL) gate open frequency; sort, filter, a
    detail view per dimension and links to it.

    Args:
        out: Folder of the site (default ``<run dir>/atlas``).
        space: ``z`` (objective features) or ``h`` (backbone output).
        images_per_dim: Images in a dimension's strip (its detail view).
        card_images: Images on a dimension's card (the strip's first ones).
        image_format: ``png`` (lossless; small images), ``jpeg`` or ``webp`` (photographs).
        eps: Activation threshold on ``|ẑ|``.
        sepin: Also estimate per-dimension SEPIN on augmented view pairs of the split.
        name: Label of the model on the page (default: the method's class name).
        key: Folder-safe id of the model (``img/<key>/``).
        title: Page title (default ``"<name> feature atlas"``).
        write_site: Write ``index.html`` (the atlas command sets False to write one page for
            several models itself).
    """

    def __init__(
        self,
        out: str | None = None,
        space: Literal["z", "h"] = "z",
        images_per_dim: int = 16,
        card_images: int = 8,
        image_format: Literal["png", "jpeg", "webp"] = "png",
        eps: float = 1e-5,
        sepin: bool = True,
        name: str | None = None,
        key: str = "m0",
        title: str | None = None,
        write_site: bool = True,
    ) -> None:
        check_choice("space", space, ("z", "h"))
        check_at_least("images_per_dim", images_per_dim, 1)
        check_at_least("card_images", card_images, 1)
        check_choice("image_format", image_format, tuple(IMAGE_FORMATS))
        check_at_least("eps", eps, 0)
        if not re.fullmatch(r"[a-z0-9_-]+", key):
            raise ConfigError(f"key must match [a-z0-9_-]+, got {key!r}", key="key")
        self.out = None if out is None else Path(out)
        self.space, self.eps, self.sepin = space, eps, sepin
        self.images_per_dim, self.card_images = images_per_dim, min(card_images, images_per_dim)
        self.image_format, self.name, self.key, self.title = image_format, name, key, title
        self.write_site = write_site
        self.entry: dict[str, Any] | None = None  # the model's document, after a test (rank 0)
        self.index: Path | None = None  # the page written, after a test (rank 0)
        self._measured: SplitProfile | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Refuse, before the test loop starts, a model or data the atlas cannot read."""
        if stage != "test":
            return
        check_encoder(pl_module, self.space, "FeatureAtlas")
        check_atlas_data(trainer.datamodule, "FeatureAtlas")

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        datamodule = trainer.datamodule  # checked in setup
        rank, world = trainer.global_rank, trainer.world_size
        most = batch_limit(trainer, "test", datamodule.clean_dataloader("test", rank, world))
        self._measured = profile_split(
            pl_module, datamodule, "test", space=self.space, eps=self.eps,
            top_k=self.images_per_dim, sepin=self.sepin, rank=rank, world_size=world,
            most_batches=most,
        )  # fmt: skip

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Logged epoch metrics (the probe's accuracy) are in callback_metrics only now.
        out = self.out or run_dir(trainer) / "atlas"  # run_dir on every rank (a collective)
        if trainer.is_global_zero and self._measured is not None:
            self.entry = self._write(trainer, pl_module, out)
            if self.write_site:
                title = self.title or f"{self.entry['name']} feature atlas"
                self.index = write_page(out, [self.entry], title)
                rank_zero_info(f"Feature atlas: {self.index} (open it in a browser)")
                self._log(trainer, out, title)
        self._measured = None
        trainer.strategy.barrier("FeatureAtlas")

    def _write(self, trainer: L.Trainer, pl_module: L.LightningModule, out: Path) -> dict:
        """Write this model's strips; return its document."""
        assert self._measured is not None
        datamodule = trainer.datamodule
        dataset = datamodule.clean_dataloader("test").dataset
        aug = datamodule.augmentation
        read = ImageReader(dataset, aug.mean, aug.std)
        tops = strip_indices(self._measured, self.eps)
        height, width = read(0).shape[:2]
        scale = upscale_factor(height, width)  # 8x8 digits: stored 40x40, legible anywhere
        write_strips(out, self.key, tops, read, self.image_format, scale)
        height, width = height * scale, width * scale
        method = type(pl_module).__name__
        checkpoint = getattr(trainer, "ckpt_path", None)
        return model_entry(
            self._measured,
            key=self.key,
            name=self.name or method,
            info={
                "method": method,
                "checkpoint": None if checkpoint is None else str(checkpoint),
                "data": type(datamodule).__name__,
                "split": "test",
                "space": self.space,
            },
            class_names=class_names(datamodule, dataset, int(datamodule.num_classes), "test"),
            eps=self.eps,
            images={
                "width": width,
                "height": height,
                "per_dim": self.images_per_dim,
                "card": self.card_images,
                "ext": self.image_format,
            },
            tops=tops,
            top_labels=[[read.label(i) for i in top] for top in tops],
            accuracy=accuracy_of(dict(trainer.callback_metrics), "test"),
        )

    def _log(self, trainer: L.Trainer, out: Path, title: str) -> None:
        """An HTML panel and an artifact for each W&B logger."""
        assert self.entry is not None
        for logger in trainer.loggers:
            if not isinstance(logger, WandbLogger):
                continue
            page = single_file_page(out, [self.entry], title, PANEL_DIMS)
            artifact = f"atlas-{logger.version}"
            args = ("test/atlas", page, out, artifact, "atlas")
            if hasattr(logger, "log_site"):  # the project's logger: W&B faults never stop a run
                logger.log_site(*args)
            else:
                log_site(logger, *args)
