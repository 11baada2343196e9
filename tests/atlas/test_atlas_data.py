"""The numbers an atlas page shows are the project's metrics on the same split; bad input
gets a clear message or a page that says so."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch
from PIL import Image

from ncl_lightning.atlas import FeatureAtlas, build_atlas, read_atlas
from ncl_lightning.atlas.collect import SplitProfile
from ncl_lightning.atlas.data_config import load_datamodule
from ncl_lightning.atlas.model import model_entry, strip_indices
from ncl_lightning.atlas.site import write_page
from ncl_lightning.callbacks import FeatureStatistics
from ncl_lightning.checkpoints.load import load_method
from ncl_lightning.evaluation import LinearProbe
from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.metrics.functional import l2_normalize_rows
from ncl_lightning.metrics.functional.profile import dimension_profile
from tests.conftest import ROOT

DATA = ROOT / "configs" / "demo" / "digits_cl.yaml"
SHARED = ("sparsity", "active_dims", "semantic_consistency", "semantic_entropy",
          "sepin@1", "sepin@10", "sepin@all")  # fmt: skip


def _quiet_trainer(**kwargs) -> L.Trainer:
    return L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False,
                     enable_model_summary=False, enable_checkpointing=False, **kwargs)  # fmt: skip


@pytest.mark.slow
def test_page_numbers_equal_feature_statistics_on_the_split(demo_atlas: Path) -> None:
    atlas = read_atlas(demo_atlas / "index.html")
    for model in atlas["models"]:
        method = load_method(model["checkpoint"])
        trainer = _quiet_trainer(callbacks=[FeatureStatistics(spaces=["z"])])
        logged = trainer.test(method, datamodule=load_datamodule(DATA), verbose=False)[0]
        for key in SHARED:
            expected = pytest.approx(logged[f"test/z/{key}"], rel=1e-4, abs=1e-6)
            assert model["metrics"][key] == expected, (model["name"], key)
        assert model["metrics"]["accuracy"] == pytest.approx(logged["test/online_acc"])
        if "gate_open_rate" in model["metrics"]:
            assert model["metrics"]["gate_open_rate"] == pytest.approx(
                logged["test/gate/open_rate"], rel=1e-5
            )


@pytest.mark.slow
def test_per_dimension_values_and_strips_follow_the_features(demo_atlas: Path) -> None:
    atlas = read_atlas(demo_atlas / "index.html")
    model = atlas["models"][1]  # NCL
    method = load_method(model["checkpoint"])
    data = load_datamodule(DATA)
    loader = data.clean_dataloader("test")
    with torch.no_grad():
        z = torch.cat([method.encode(x).z for x, _ in loader])
        labels = torch.cat([y for _, y in loader])
    z_hat = l2_normalize_rows(z)
    assert model["num_samples"] == len(z)
    assert model["dims"]["ea"] == pytest.approx(z_hat.mean(0).tolist(), abs=1e-6)
    active = z_hat.abs() > model["eps"]
    assert model["dims"]["freq"] == pytest.approx(active.double().mean(0).tolist())
    for j in range(z.shape[1]):
        hist = [int((active[:, j] & (labels == c)).sum()) for c in range(10)]
        assert model["dims"]["hist"][j] == hist
        assert model["dims"]["dead"][j] == (sum(hist) == 0)
        top = model["dims"]["top"][j]
        if top:  # the strip: the most active samples, in order, and no inactive one
            values = z_hat[top, j]
            assert (values > model["eps"]).all()
            assert (values[:-1] >= values[1:]).all()
            assert float(values[0]) == pytest.approx(float(z_hat[:, j].max()))
            assert model["dims"]["top_labels"][j] == labels[top].tolist()
            strip = Image.open(demo_atlas / "img" / model["key"] / f"{j}.png")
            side = model["images"]["width"]  # 8x8 digits, stored nearest-upscaled
            assert side == model["images"]["height"] and side % 8 == 0 and side >= 32
            assert strip.size == (side * len(top), side)


@pytest.mark.slow
def test_a_probe_checkpoint_without_projector_is_refused(demo_run, tmp_path: Path) -> None:
    pretrained = next((demo_run.out / "digits_ncl").rglob("last.ckpt"))
    probe = LinearProbe(str(pretrained), num_classes=10, batch_size=64)
    trainer = _quiet_trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=1,
                             default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(probe, load_datamodule(DATA))
    trainer.save_checkpoint(tmp_path / "probe.ckpt")
    with pytest.raises(ConfigError, match="LinearProbe has no projector") as err:
        build_atlas([tmp_path / "probe.ckpt"], tmp_path / "atlas", DATA)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "atlas").exists()  # refused before any work
    # as a callback in a test run: refused in setup, before the test loop reads a batch
    tester = _quiet_trainer(callbacks=[FeatureAtlas(str(tmp_path / "cb"))])
    with pytest.raises(ConfigError, match="FeatureAtlas: LinearProbe has no projector"):
        tester.test(probe, datamodule=load_datamodule(DATA), verbose=False)
    assert tester.test_loop.batch_progress.total.ready == 0


def _page_of(z: torch.Tensor, labels: torch.Tensor, classes: int, folder: Path) -> dict:
    profile = dimension_profile(z, labels, classes, top_k=4)
    measured = SplitProfile(profile, None, None, [])
    tops = strip_indices(measured, 1e-5)
    entry = model_entry(
        measured, key="m0", name="test", info={"split": "test"},
        class_names=[str(c) for c in range(classes)], eps=1e-5,
        images=dict(width=8, height=8, per_dim=4, card=4, ext="png"), tops=tops,
    )  # fmt: skip
    return read_atlas(write_page(folder, [entry], "t"))["models"][0]


def test_a_split_with_one_class_says_consistency_means_nothing(tmp_path: Path) -> None:
    z = torch.relu(torch.randn(20, 6, generator=torch.Generator().manual_seed(0)))
    model = _page_of(z, torch.zeros(20, dtype=torch.long), 1, tmp_path)
    assert any("one class" in note for note in model["notes"])
    assert model["metrics"]["semantic_consistency"] == 100.0


def test_a_model_with_every_dimension_dead_says_so(tmp_path: Path) -> None:
    model = _page_of(torch.zeros(20, 6), torch.arange(20) % 3, 3, tmp_path)
    assert any("All 6 dimensions are dead" in note for note in model["notes"])
    assert model["metrics"]["active_dims"] == 0 and model["metrics"]["dead_dims"] == 6
    assert "semantic_consistency" not in model["metrics"]  # unknown, not NaN in JSON
    assert all(model["dims"]["dead"]) and not any(model["dims"]["top"])
    assert model["dims"]["consistency"] == [None] * 6


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("trainer: {max_epochs: 1}\n", r"bad\.yaml: no data section"),
        ("data: {class_path: DigitsDataModul}\n", r"bad\.yaml: .*DigitsDataModul"),
        ("data: {class_path: SparseCodingDataModule}\n", "has no class labels"),
    ],
)
def test_a_data_config_without_data_or_labels_is_refused_before_work(
    tmp_path: Path, text: str, match: str
) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    with pytest.raises(ConfigError, match=match) as err:  # data is checked before checkpoints
        build_atlas([tmp_path / "missing.ckpt"], tmp_path / "atlas", config)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "atlas").exists()
