"""``TopActivations`` in a real fit: a grid titled with the model and epoch, rows labelled
with the majority class of their images, the mean majority share of the rows logged, and
PDF/SVG copies of every picture."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger
from PIL import Image
from torch import Tensor

from ncl_lightning import NCL, DigitsDataModule, SmallCNN, TopActivations
from ncl_lightning.callbacks.schedule import class_names
from ncl_lightning.callbacks.top_activations import model_title
from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.metrics.functional import expected_activation, l2_normalize_rows
from ncl_lightning.plot import pictures
from ncl_lightning.plot.metrics_csv import read_metrics
from ncl_lightning.studies.seeds import final_metrics
from tests.plot.test_figures import assert_valid_vector

NAMES = [f"digit {c}" for c in range(10)]


class NamedDigits(DigitsDataModule):
    """Digits with class names, as a DataModule with ``classes`` has."""

    classes = NAMES


def test_class_names_come_from_the_datamodule_or_the_wrapped_dataset() -> None:
    base = SimpleNamespace(classes=["cat", "dog"])
    wrapped = SimpleNamespace(dataset=SimpleNamespace(dataset=base))
    assert class_names(SimpleNamespace(), wrapped, 2) == ["cat", "dog"]
    assert class_names(SimpleNamespace(class_names=("a", "b")), None, 2) == ["a", "b"]
    assert class_names(SimpleNamespace(classes=["a"]), None, 2) == ["0", "1"]  # wrong count
    assert class_names(SimpleNamespace(), None, 3) == ["0", "1", "2"]


@pytest.mark.parametrize(
    ("formats", "message"),
    [(["png", "eps"], "formats must be one of 'png', 'pdf', 'svg', got 'eps'"),
     ([], "formats: give at least one of png, pdf, svg")],
)  # fmt: skip
def test_formats_argument_is_checked_at_construction(formats, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        TopActivations(formats=formats)
    assert str(err.value) == message and err.value.key == "formats"
    assert TopActivations(formats=["svg"]).formats == ["png", "svg"]  # PNG always (loggers)


@pytest.mark.slow
def test_grid_title_row_classes_and_vector_files_in_a_fit(tmp_path: Path, monkeypatch) -> None:
    drawn = []
    original = pictures.activation_grid

    def keep(*args, **kwargs):
        drawn.append(original(*args, **kwargs))
        return drawn[-1]

    monkeypatch.setattr(pictures, "activation_grid", keep)
    encoded = []  # the features the callback ranked (in eval mode, at validation end)
    encode = TopActivations._encode

    def keep_features(self, *args):
        encoded.append(encode(self, *args))
        return encoded[-1]

    monkeypatch.setattr(TopActivations, "_encode", keep_features)
    torch.manual_seed(0)
    data = NamedDigits(batch_size=64, augment_on="device")
    model = NCL(SmallCNN(1, 8, 16), proj_hidden_dim=32, proj_output_dim=16, knn_k=5)
    callback = TopActivations(num_dims=3, num_images=5, cell=40, formats=["png", "pdf", "svg"])
    trainer = L.Trainer(
        accelerator="cpu", max_epochs=2, logger=False, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False, num_sanity_val_steps=0,
        default_root_dir=tmp_path, limit_train_batches=2, limit_val_batches=2,
        callbacks=[callback],
    )  # fmt: skip
    trainer.fit(model, data)

    paths = callback.last_paths
    # the second epoch's validation: "Epoch 2/2" in the console, epoch002 in the name
    assert paths["top_activations"].name == "val_z_epoch002_top_activations.png"
    for png in paths.values():
        assert png.suffix == ".png" and png.is_file()
        for suffix in (".pdf", ".svg"):
            assert_valid_vector(png.with_suffix(suffix))
    with Image.open(paths["top_activations"]) as im:
        assert im.size == pictures.grid_size(3, 5, 40)

    # the slow obvious reference: the same features, ranked and counted by hand
    ea = expected_activation(l2_normalize_rows(encoded[-1]))
    expected_rows, expected_captions = [], []
    for j, labels, top in reference_rows(encoded[-1], data.val_dataset, 3, 5):
        counts = {c: labels.count(c) for c in labels}
        share = round(100 * counts[top] / len(labels))
        expected_rows.append(f"dim {j}\nEA {float(ea[j]):.3f}\n{NAMES[top]} {share}%")
        expected_captions += [NAMES[c] for c in labels]
    texts = [t.get_text() for t in drawn[-1].texts]
    assert texts[0].startswith("NCL · SmallCNN backbone\nval z, epoch 2")
    assert model_title(model) == "NCL · SmallCNN backbone"
    for row in expected_rows:
        assert row in texts, (row, texts)
    assert sorted(t for t in texts[1:] if t not in expected_rows) == sorted(expected_captions)


def reference_rows(features: Tensor, dataset, rows: int, k: int) -> list[tuple[int, list, int]]:
    """By hand: the ``rows`` dimensions of highest EA, each with the labels of its ``k`` most
    activating images and their majority class (ties: the smallest)."""
    z = l2_normalize_rows(features)
    ea = expected_activation(z)
    out = []
    for j in sorted(range(z.shape[1]), key=lambda j: -float(ea[j]))[:rows]:
        order = sorted(range(len(z)), key=lambda i: -float(z[i, j]))[:k]
        labels = [int(dataset[i][1]) for i in order]
        counts = {c: labels.count(c) for c in labels}
        out.append((j, labels, min(counts, key=lambda c: (-counts[c], c))))
    return out


def _keep_encoded(monkeypatch) -> list[Tensor]:
    """Keeps the features the callback ranks at each drawing (``_encode``'s output)."""
    encoded: list[Tensor] = []
    encode = TopActivations._encode

    def keep_features(self, *args):
        encoded.append(encode(self, *args))
        return encoded[-1]

    monkeypatch.setattr(TopActivations, "_encode", keep_features)
    return encoded


@pytest.mark.slow
def test_logged_majority_share_is_the_mean_of_the_drawn_rows(tmp_path: Path, monkeypatch) -> None:
    callback = TopActivations(num_dims=4, num_images=7)
    encoded = _keep_encoded(monkeypatch)
    torch.manual_seed(0)
    data = DigitsDataModule(batch_size=64, augment_on="device")
    model = NCL(SmallCNN(1, 8, 16), proj_hidden_dim=32, proj_output_dim=16, knn_k=5)
    logger = CSVLogger(tmp_path, name="run")
    trainer = L.Trainer(
        accelerator="cpu", max_epochs=1, logger=logger, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False, num_sanity_val_steps=0,
        default_root_dir=tmp_path, limit_train_batches=2, limit_val_batches=3,
        callbacks=[callback],
    )  # fmt: skip
    trainer.fit(model, data)

    # the slow obvious reference: the drawn rows ranked and counted by hand
    shares, classes = [], []
    for _, labels, top in reference_rows(encoded[-1], data.val_dataset, 4, 7):
        classes.append(top)
        shares.append(labels.count(top) / len(labels))
    expected = sum(shares) / len(shares)
    print(f"measured: row shares {shares}, mean {expected:.3f}")
    drawn = callback.last_majority
    assert drawn is not None and drawn.images == 7
    assert list(drawn.classes) == classes
    assert list(drawn.shares) == pytest.approx(shares)
    assert callback.last_majority_share == pytest.approx(expected)
    # logged once, at the pictures' step, to the CSV logger; the seeds study reads it back
    metrics_csv = Path(logger.log_dir) / "metrics.csv"
    (point,) = read_metrics(metrics_csv)["val/z/top_majority_share"]
    assert point.value == pytest.approx(expected)
    assert (point.step, point.epoch) == (trainer.global_step, 0)  # as Lightning's rows
    assert final_metrics(metrics_csv)["val/z/top_majority_share"] == pytest.approx(expected)


@pytest.mark.slow
def test_fast_dev_run_measures_the_rows_but_keeps_no_file(tmp_path: Path) -> None:
    callback = TopActivations(num_dims=3, num_images=5)
    torch.manual_seed(0)
    data = DigitsDataModule(batch_size=64, augment_on="device")
    model = NCL(SmallCNN(1, 8, 16), proj_hidden_dim=32, proj_output_dim=16, knn_k=5)
    trainer = L.Trainer(
        accelerator="cpu", fast_dev_run=True, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=tmp_path, callbacks=[callback],
    )  # fmt: skip
    trainer.fit(model, data)
    share = callback.last_majority_share
    assert share is not None and 0.0 < share <= 1.0
    assert callback.last_paths == {}
    assert list(tmp_path.iterdir()) == []
