"""``TopActivations``: the pictures people look at to read the features.

For the dimensions with the highest expected activation (EA), a row of the validation
images that activate each most (NCL paper, Wang et al., ICLR 2024, Figure 1); a heat map of
feature values for random samples; the dimension-by-dimension correlation matrix; and the
sorted EA curve. PNG files go to ``<run dir>/pictures/`` (beside the checkpoints), with PDF
and SVG copies beside them when ``formats`` asks; loggers that show images (W&B) get the PNGs.
The grid's title names the model (method and backbone classes), split, space and epoch; each
row its dimension, EA and the majority class of its images (the DataModule's class names when
it has them) with its share; each image its class. When the images have classes, the mean of
the rows' majority shares is logged as ``{stage}/{space}/top_majority_share``.
"""

from __future__ import annotations

import tempfile
from itertools import islice
from pathlib import Path
from typing import Any, Literal, NamedTuple

import lightning as L
import numpy as np
import torch
from torch import Tensor

from ncl_lightning.callbacks.schedule import batch_limit, class_names, epoch_due, run_dir
from ncl_lightning.foundation.protocols import PictureData, require_extra
from ncl_lightning.foundation.validation import check_choice, check_int
from ncl_lightning.metrics.functional import (
    expected_activation,
    l2_normalize_rows,
    select_by_expected_activation,
    top_k_class_counts,
)
from ncl_lightning.plot import pictures
from ncl_lightning.plot.feature_map import embed_2d, embedding_used, feature_map
from ncl_lightning.plot.style import check_formats, save_figure


def _picture_data(trainer: L.Trainer) -> PictureData:
    """The trainer's DataModule if it has images to draw; one-line ``ConfigError`` if not."""
    return require_extra(
        trainer.datamodule, PictureData, "TopActivations", "val_dataset, test_dataset and "
        "augmentation (images to draw)", "trainer.callbacks",
    )  # fmt: skip


def majority_classes(labels: Tensor, num_classes: int) -> tuple[Tensor, Tensor]:
    """Each row of integer ``labels`` ``[rows, k]`` in ``[0, num_classes)``: its most
    frequent label (ties: the smallest) ``[rows]`` int64 and its share of the row
    ``[rows]`` float64."""
    best, majority = top_k_class_counts(labels.T, num_classes).max(dim=1)  # first max: smallest
    return majority, best.double() / labels.shape[1]


class RowMajority(NamedTuple):
    """The majority class of each drawn row of top-activated images and its share.

    Attributes:
        classes: ``[rows]`` each row's most frequent class (ties: the smallest), top row
            (highest EA) first, the picture's order.
        shares: ``[rows]`` that class's share of the row's images, in [0, 1].
        images: Images per row (k), the denominator of every share.
    """

    classes: tuple[int, ...]
    shares: tuple[float, ...]
    images: int

    @property
    def mean(self) -> float:
        """The mean majority share of the rows, in [0, 1]: what is logged as
        ``{stage}/{space}/top_majority_share``."""
        return sum(self.shares) / len(self.shares)


def model_title(pl_module: L.LightningModule) -> str:
    """``"NCL · ResNet18 backbone"``: the method's class and its backbone's class."""
    backbone = getattr(pl_module, "backbone", None)
    name = type(pl_module).__name__
    return name if backbone is None else f"{name} · {type(backbone).__name__} backbone"


def _label(target: Any) -> int | None:
    """A sample's class label, or None when it carries none (e.g. dSprites' factors)."""
    if isinstance(target, (int, np.integer)) and not isinstance(target, bool):
        return int(target)
    if isinstance(target, Tensor) and target.numel() == 1 and not target.is_floating_point():
        return int(target)
    return None


class TopActivations(L.Callback):
    """Draw top-activated images, feature heat map, correlation matrix and EA curve.

    Runs on rank 0 only, over the DataModule's clean ``val_dataset`` (``test_dataset`` at
    test) in order, so row images are found by index. EA here is measured on those
    evaluation features. When the images have classes, each drawing also logs the mean over
    its rows of the row's majority-class share, ``{stage}/{space}/top_majority_share`` in
    [0, 1], to every logger at the pictures' step, and keeps the rows' majorities as
    ``last_majority`` (its mean: ``last_majority_share``).

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
        formats: Files of every picture: ``png`` (always written: the loggers get it) and,
            for papers, the vector ``pdf`` and ``svg`` beside it (same name, other suffix).
        image_labels: Write each grid image's class under it (when the data has classes).
        feature_map: Also draw a 2-D map of the encoded images' features coloured by class
            (``feature_map``, ``python -m ncl_lightning.atlas.feature_map``); t-SNE of 10,000
            images takes about a minute on a CPU.
        feature_map_method: ``auto`` (UMAP where ``umap-learn`` is installed, else
            t-SNE), ``umap`` or ``tsne``.
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
        formats: list[str] = ["png"],  # noqa: B006 (a typed list: it becomes YAML)
        image_labels: bool = True,
        feature_map: bool = False,
        feature_map_method: Literal["auto", "umap", "tsne"] = "auto",
    ) -> None:
        for name, value in (("every_n_epochs", every_n_epochs), ("num_dims", num_dims),
                            ("num_images", num_images), ("heatmap_samples", heatmap_samples),
                            ("cell", cell)):  # fmt: skip
            check_int(name, value)
        check_choice("space", space, ("z", "h"))
        if feature_map:
            embedding_used(feature_map_method)  # an unknown name, or umap not installed
        self.feature_map = feature_map
        self.feature_map_method = feature_map_method
        self._labels: Tensor | None = None  # classes of the images _encode encoded
        self.formats = list(check_formats(["png", *check_formats(formats)]))
        self.image_labels = image_labels
        self.every_n_epochs = every_n_epochs
        self.space = space
        self.num_dims = num_dims
        self.num_images = num_images
        self.heatmap_samples = heatmap_samples
        self.max_samples = max_samples
        self.cell = cell
        self.seed = seed
        self.last_paths: dict[str, Path] = {}
        self.last_rows: dict[str, dict[int, np.ndarray]] = {}
        """``stage -> {dim: [H, k · W, 3] uint8}``: each drawn row's images side by side."""
        self.last_majority: RowMajority | None = None
        """The last drawing's row majorities (None when its images have no classes); kept
        under ``fast_dev_run`` too, where no file is kept."""

    @property
    def last_majority_share(self) -> float | None:
        """The last drawing's mean majority share of its rows, in [0, 1] (None without
        classes): the number logged as ``{stage}/{space}/top_majority_share``."""
        return None if self.last_majority is None else self.last_majority.mean

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Refuse data without images to draw before the first step, not at the first draw."""
        _picture_data(trainer)

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if epoch_due(trainer, self.every_n_epochs):
            self.draw(trainer, pl_module, "val")

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.draw(trainer, pl_module, "test")

    @torch.no_grad()
    def _encode(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> Tensor:
        datamodule = trainer.datamodule  # a PictureData: draw checked it
        loader = datamodule.val_dataloader() if stage == "val" else datamodule.test_dataloader()
        most = batch_limit(trainer, stage, loader)  # fast_dev_run, limit_*_batches
        features, labels, seen = [], [], 0
        for x, y in islice(loader, most):
            features.append(
                getattr(pl_module.encode(x.to(pl_module.device)), self.space).float().cpu()
            )
            labels.append(y.cpu() if isinstance(y, Tensor) and y.dim() == 1 else None)
            seen += len(x)
            if self.max_samples is not None and seen >= self.max_samples:
                break
        # the feature map's colours: integer class labels of the encoded images, if any
        known = labels and all(y is not None and not y.is_floating_point() for y in labels)
        self._labels = torch.cat(labels)[: self.max_samples] if known else None
        return torch.cat(features)[: self.max_samples]

    def draw(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> dict[str, Path]:
        """Encode the split, save the four pictures and hand them to image loggers. Under
        ``fast_dev_run`` (Lightning's dry run, which keeps no file) they are drawn into a
        scratch folder that is then removed."""
        if trainer.fast_dev_run:
            with tempfile.TemporaryDirectory() as scratch:
                self._draw(trainer, pl_module, stage, Path(scratch))
            self.last_paths = {}
            return {}
        out = run_dir(trainer) / "pictures"  # on every rank: trainer.log_dir is a collective
        return self._draw(trainer, pl_module, stage, out)

    def _draw(
        self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str, out: Path
    ) -> dict[str, Path]:
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
        items = [[dataset[int(i)] for i in row] for row in top]
        images = torch.stack([torch.stack([item[0] for item in row]) for row in items])
        aug = datamodule.augmentation
        pixels = pictures.to_uint8(images.flatten(0, 1), aug.mean, aug.std)
        pixels = pixels.reshape(len(dims), k, *pixels.shape[1:])
        count = int(getattr(datamodule, "num_classes", 0) or 0)
        classes = [[_label(item[1]) for item in row] for row in items]
        known = count > 0 and all(c is not None and 0 <= c < count for row in classes for c in row)
        names = class_names(datamodule, dataset, count) if known else []
        majority: list[tuple[int, float] | None] = [None] * len(dims)
        self.last_majority = None
        if known:
            best, share = majority_classes(torch.tensor(classes), count)
            majority = list(zip(best.tolist(), share.tolist(), strict=True))
            self.last_majority = RowMajority(tuple(best.tolist()), tuple(share.tolist()), k)
        labels = [
            pictures.row_label(int(j), float(ea[j]), row, names)
            for j, row in zip(dims, majority, strict=True)
        ]
        captions = [[names[c] for c in row] for row in classes] if known else None

        out.mkdir(parents=True, exist_ok=True)
        # epochs counted as the console's lines count them: the validation of the 30th
        # epoch draws epoch030 ("Epoch 30/30"); a test, the epochs trained before it
        epoch = trainer.current_epoch + (1 if stage == "val" else 0)
        tag = f"{stage}_{self.space}_epoch{epoch:03d}"
        order = ea.argsort(descending=True)
        g = torch.Generator().manual_seed(self.seed)
        sample = torch.randperm(n, generator=g)[: self.heatmap_samples]
        formats = self.formats
        title = f"{model_title(pl_module)}\n{stage} {self.space}, epoch {epoch}"
        grid = pictures.activation_grid(
            np.asarray(pixels), labels, title, captions if self.image_labels else None, self.cell
        )
        paths = {
            "top_activations": save_figure(grid, out / f"{tag}_top_activations.png", formats)[0],
            "heatmap": pictures.heatmap(
                z[sample][:, order],
                out / f"{tag}_heatmap.png",
                f"{self.space} of {len(sample)} random {stage} images",
                "dimension (by EA)",
                "sample",
                formats,
            ),
            "correlation": pictures.correlation(
                z[:, order],
                out / f"{tag}_correlation.png",
                f"{self.space}: correlation of dimensions (by EA)",
                formats,
            ),
            "ea_curve": pictures.ea_curve(
                ea, out / f"{tag}_ea_curve.png", f"{self.space}: expected activation", formats
            ),
        }
        if self.feature_map:
            xy, used = embed_2d(z, self.feature_map_method, self.seed)
            paths["feature_map"] = feature_map(
                [(model_title(pl_module), xy,
                  None if self._labels is None else self._labels.numpy())],
                out / f"{tag}_feature_map.png",
                f"{stage} {self.space} of {n} images, {used}",
                names or (class_names(datamodule, dataset, count) if count else []),
                formats,
            )  # fmt: skip
        for logger in trainer.loggers:
            if hasattr(logger, "log_image"):
                for name, path in paths.items():
                    logger.log_image(
                        key=f"{stage}/{self.space}/{name}",
                        images=[str(path)],
                        step=trainer.global_step,
                    )
            if self.last_majority is not None:  # at the pictures' step (CSV, W&B, ...)
                # with the epoch, as Lightning logs every metric (metrics.csv readers need it)
                share = {f"{stage}/{self.space}/top_majority_share": self.last_majority.mean}
                logger.log_metrics(
                    {**share, "epoch": trainer.current_epoch}, step=trainer.global_step
                )
        self.last_paths = paths
        self.last_rows[stage] = {  # FeatureStatistics' per-dimension table shows them
            int(j): np.concatenate(list(row), axis=1) for j, row in zip(dims, pixels, strict=True)
        }
        return paths
