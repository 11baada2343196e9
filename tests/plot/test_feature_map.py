"""The 2-D feature map (issue 47): the embedding keeps separated classes apart, the
callback option draws it with the other pictures and hands it to image loggers, and the
tool draws checkpoints side by side from their data config."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger
from PIL import Image

from ncl_lightning.atlas.feature_map import main as feature_map_main
from ncl_lightning.callbacks import TopActivations
from ncl_lightning.data import DigitsDataModule
from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.plot.feature_map import embed_2d, embedding_used
from tests.checkpoints.test_checkpoint import FACTORIES, _fit_and_save
from tests.conftest import ROOT

DIGITS = str(ROOT / "configs" / "demo" / "digits_ncl.yaml")


def _nearest_neighbour_accuracy(xy: np.ndarray, labels: np.ndarray) -> float:
    """Share of points whose nearest other point (in 2-D) has their class, one by one."""
    hits = 0
    for i in range(len(xy)):
        distances = ((xy - xy[i]) ** 2).sum(axis=1)
        distances[i] = np.inf
        hits += int(labels[int(distances.argmin())] == labels[i])
    return hits / len(xy)


def test_the_embedding_keeps_separated_classes_apart() -> None:
    g = torch.Generator().manual_seed(0)
    labels = torch.arange(90) % 3
    centres = 6.0 * torch.eye(3, 32)
    features = centres[labels] + torch.randn(90, 32, generator=g)
    xy, used = embed_2d(features, "tsne", seed=0)
    assert used == "tsne" and xy.shape == (90, 2)
    assert _nearest_neighbour_accuracy(xy, labels.numpy()) > 0.95
    # the same points without the class structure: about chance (1/3)
    shuffled = labels[torch.randperm(90, generator=g)].numpy()
    assert _nearest_neighbour_accuracy(xy, shuffled) < 0.6
    again, _ = embed_2d(features, "tsne", seed=0)
    np.testing.assert_allclose(again, xy, rtol=1e-5, atol=1e-5)  # seeded


def test_methods_are_checked() -> None:
    with pytest.raises(ConfigError, match="feature_map_method must be one of"):
        embedding_used("pca")
    try:
        import umap  # noqa: F401
    except ImportError:
        assert embedding_used("auto") == "tsne"
        with pytest.raises(ConfigError, match="pip install umap-learn"):
            embedding_used("umap")
    else:
        assert embedding_used("auto") == "umap"


class _ImageLogger(CSVLogger):
    """A CSV logger that keeps what ``log_image`` got (as W&B's would upload it)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.images: dict[str, list[str]] = {}

    def log_image(self, key: str, images: list[str], step: int | None = None) -> None:
        self.images[key] = images


@pytest.mark.slow
def test_the_callback_draws_the_map_and_logs_it(tmp_path: Path) -> None:
    logger = _ImageLogger(tmp_path)
    pictures = TopActivations(every_n_epochs=1, feature_map=True, feature_map_method="tsne",
                              max_samples=300)  # fmt: skip
    trainer = L.Trainer(max_epochs=1, limit_train_batches=2, accelerator="cpu", logger=logger,
                        callbacks=[pictures], enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        num_sanity_val_steps=0)  # fmt: skip
    trainer.fit(FACTORIES["ncl"](), DigitsDataModule(batch_size=64))
    path = pictures.last_paths["feature_map"]
    assert path.name == "val_z_epoch001_feature_map.png" and path.is_file()
    assert logger.images["val/z/feature_map"] == [str(path)]
    assert pictures._labels is not None and len(pictures._labels) == 300


@pytest.mark.slow
def test_the_tool_draws_checkpoints_side_by_side(tmp_path: Path, capsys) -> None:
    cl = _fit_and_save(FACTORIES["cl"](), tmp_path / "cl.ckpt")
    ncl = _fit_and_save(FACTORIES["ncl"](), tmp_path / "ncl.ckpt")
    out = feature_map_main([str(cl), str(ncl), "--names", "CL", "NCL", "--method", "tsne",
                            "--config", DIGITS, "--max-samples", "200",
                            "--out", str(tmp_path / "map.png")])  # fmt: skip
    assert out == tmp_path / "map.png" and f"Feature map: {out}" in capsys.readouterr().out
    width, height = Image.open(out).size
    assert width > 2 * height  # two panels side by side, and the legend
    with pytest.raises(SystemExit) as stop:
        feature_map_main([str(cl), "--names", "A", "B", "--config", DIGITS])
    assert stop.value.code == 2
    assert "--names: 2 names for 1 checkpoints" in capsys.readouterr().err
