"""The W&B dashboard: per-key axes and summaries (``define_metric``), the per-dimension
table, and ``python -m ncl_lightning.plot`` on offline W&B runs.

The slow tests make one real offline W&B run (NCL on digits, 2 epochs, FeatureStatistics
with SEPIN and TopActivations, then ``trainer.test``) and read its ``run-<id>.wandb``
file back with ``tests.helpers.wandb_run`` (a reader independent of the one under test).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import lightning as L
import numpy as np
import pytest
import torch
import wandb
from lightning.pytorch.loggers import CSVLogger

from ncl_lightning.callbacks import FeatureStatistics, TopActivations
from ncl_lightning.callbacks.feature_statistics import FeatureMetricSet
from ncl_lightning.callbacks.wandb_tables import dimension_rows, metric_definition
from ncl_lightning.data import DigitsDataModule
from ncl_lightning.foundation.errors import DataError
from ncl_lightning.methods import NCL
from ncl_lightning.nn import SmallCNN
from ncl_lightning.plot import load_runs, plot_curves, read_history
from ncl_lightning.plot.__main__ import main as plot_main
from ncl_lightning.runtime.loggers import WandbLogger
from tests.helpers.wandb_run import OfflineRun, offline_runs, read_records, read_run

D = 16  # width of z
TOP_DIMS = 4  # rows TopActivations draws


# -- metric definitions and table rows ------------------------------------------------------
@pytest.mark.parametrize(
    ("key", "axis", "summary"),
    [
        ("train/loss", "trainer/global_step", "min,last"),
        ("train/objective", "trainer/global_step", "min,last"),
        ("train/offline_linear/acc_top1_step", "trainer/global_step", "max,last"),
        ("lr-LARS/pg1", "trainer/global_step", None),
        ("train/kl", "trainer/global_step", None),
        ("val/online_acc", "epoch", "max,last"),
        ("val/z/semantic_consistency_top100", "epoch", "max,last"),
        ("val/z/retrieval_p@10", "epoch", "max,last"),
        ("test/z/sepin@all", "epoch", "max,last"),
        ("val/z/sparsity", "epoch", "max,last"),
        ("test/selection/ea/k8/linear_acc", "epoch", "max,last"),
        ("val/z/top_activations", "epoch", None),
    ],
)
def test_metric_definition(key: str, axis: str, summary: str | None) -> None:
    definition = metric_definition(key)
    assert definition is not None
    assert definition["step_metric"] == axis and definition["step_sync"] is True
    assert definition.get("summary") == summary


@pytest.mark.parametrize("key", ["trainer/global_step", "epoch", "_step", "_runtime"])
def test_axes_and_wandb_keys_get_no_definition(key: str) -> None:
    assert metric_definition(key) is None


def test_dimension_rows_sorted_by_ea_with_empty_cells() -> None:
    columns = {
        "majority_class": [2, -1, 0],
        "ea": [0.1, 0.0, 0.3],
        "consistency": [50.0, math.nan, 100.0],
        "extra": [7, 8, 9],
    }
    header, rows = dimension_rows(columns, {2: "picture"})
    assert header == ["dim", "EA", "consistency", "majority class", "extra", "top images"]
    assert rows == [
        [2, 0.3, 100.0, 0, 9, "picture"],
        [0, 0.1, 50.0, 2, 7, None],
        [1, 0.0, None, None, 8, None],
    ]
    assert dimension_rows({"ea": [0.0, 0.0]}) == (["dim", "EA"], [[0, 0.0], [1, 0.0]])


def test_feature_metric_set_dimensions_match_a_loop() -> None:
    g = torch.Generator().manual_seed(0)
    z = torch.rand(50, 6, generator=g) - 0.3
    z[:, 4] = 0  # never activated
    z[z < 0] = 0
    labels = torch.randint(0, 3, (50,), generator=g)
    metrics = FeatureMetricSet(6, 3)
    metrics.update(z[:20], labels[:20])
    metrics.update(z[20:], labels[20:])
    out = metrics.dimensions()
    for i in range(6):
        normed = [float(row[i]) / float(row.norm()) if float(row.norm()) > 0 else 0.0 for row in z]
        assert out["ea"][i].item() == pytest.approx(sum(normed) / 50, abs=1e-6)
        active = [n > 1e-5 for n in normed]
        assert out["frequency"][i].item() == pytest.approx(sum(active) / 50)
        pairs = list(zip(active, labels.tolist(), strict=True))
        counts = [sum(1 for a, y in pairs if a and y == c) for c in range(3)]
        if sum(counts) == 0:
            assert math.isnan(out["consistency"][i].item()) and out["majority_class"][i] == -1
        else:
            assert out["consistency"][i].item() == pytest.approx(100 * max(counts) / sum(counts))
            assert out["majority_class"][i].item() == counts.index(max(counts))
    assert out["frequency"][4] == 0
    # still usable afterwards: the synchronised view did not touch the states
    assert metrics.compute()["active_dims"].item() == 5


class TableRecorder(CSVLogger):
    """A logger that takes the table (as the W&B logger does), recording the calls."""

    def __init__(self, save_dir: str) -> None:
        super().__init__(save_dir)
        self.calls: list[tuple[Any, ...]] = []

    def log_dimensions(self, *args: Any) -> None:
        self.calls.append(args)


def test_table_goes_only_to_loggers_that_take_it_and_only_from_rank_0(tmp_path: Path) -> None:
    stats = FeatureStatistics()
    stats.dimensions["test"] = {"ea": torch.tensor([0.5, 0.25]), "frequency": torch.ones(2)}
    tops, h_tops = TopActivations(space="z"), TopActivations(space="h")
    tops.last_rows = {"test": {0: np.zeros((2, 4, 3), np.uint8)}}
    h_tops.last_rows = {"test": {1: "not z"}}  # type: ignore[dict-item]
    recorder, plain = TableRecorder(str(tmp_path)), CSVLogger(str(tmp_path))
    trainer: Any = SimpleNamespace(
        is_global_zero=False, callbacks=[tops, h_tops], loggers=[plain, recorder], global_step=7
    )
    stats.on_test_end(trainer, None)  # type: ignore[arg-type]
    assert recorder.calls == []
    trainer.is_global_zero = True
    stats.on_fit_end(trainer, None)  # type: ignore[arg-type]  # no validation measured
    assert recorder.calls == []
    stats.on_test_end(trainer, None)  # type: ignore[arg-type]
    ((key, columns, rows, step),) = recorder.calls
    assert (key, step, list(rows)) == ("test/z/dimensions", 7, [0])
    assert columns == {"ea": [0.5, 0.25], "frequency": [1.0, 1.0]}


# -- a real offline run ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def offline(tmp_path_factory: pytest.TempPathFactory) -> tuple[OfflineRun, FeatureStatistics]:
    save = tmp_path_factory.mktemp("wandb_dashboard")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WANDB_MODE", "offline")
        mp.setenv("WANDB_SILENT", "true")
        wandb.finish()
        L.seed_everything(0)
        model = NCL(
            backbone=SmallCNN(in_channels=1, width=8, out_dim=16), proj_hidden_dim=32,
            proj_output_dim=D, num_classes=10, batch_size=64, warmup_epochs=0,
        )  # fmt: skip
        stats = FeatureStatistics(spaces=["z"], sepin_max_batches=1)
        tops = TopActivations(
            every_n_epochs=1, num_dims=TOP_DIMS, num_images=3, heatmap_samples=8, cell=16,
            max_samples=128,
        )  # fmt: skip
        trainer = L.Trainer(
            max_epochs=2, limit_train_batches=2, limit_val_batches=2, limit_test_batches=2,
            accelerator="cpu", logger=WandbLogger(save_dir=save, project="p", name="dash"),
            callbacks=[stats, tops], enable_checkpointing=False, enable_progress_bar=False,
            enable_model_summary=False, log_every_n_steps=1, default_root_dir=save,
        )  # fmt: skip
        data = DigitsDataModule(batch_size=64, num_workers=0)
        trainer.fit(model, data)
        trainer.test(model, data)
        wandb.finish()
    (folder,) = offline_runs(save)
    return read_run(folder), stats


def _metric_records(run: OfflineRun) -> dict[str, Any]:
    (path,) = run.folder.glob("run-*.wandb")
    records = [r.metric for r in read_records(path) if r.WhichOneof("record_type") == "metric"]
    return {m.name: m for m in records if m.name}


@pytest.mark.slow
def test_every_logged_key_has_its_axis_and_summary(offline: tuple[OfflineRun, Any]) -> None:
    run, _ = offline
    defined = _metric_records(run)
    axes = ("trainer/global_step", "epoch")
    keys = {k for k in run.keys if not k.startswith("_") and k not in axes}
    assert {"train/loss", "val/online_acc", "test/z/sepin@10", "val/z/dimensions"} <= keys
    for key in keys:
        expected = metric_definition(key)
        assert expected is not None
        metric = defined[key]
        assert metric.step_metric == expected["step_metric"], key
        assert metric.options.step_sync
        summary = expected.get("summary")
        kinds = {f.name for f, on in metric.summary.ListFields() if on}
        assert kinds == (set(summary.split(",")) if summary else set()), key
    # W&B makes one panel section per prefix before the first "/"
    assert {k.split("/")[0] for k in keys} == {"train", "val", "test"}


def _table(run: OfflineRun, key: str) -> tuple[dict[str, Any], dict[str, Any]]:
    (row,) = [r[key] for r in run.rows_with(key)]
    return row, json.loads((run.folder / "files" / row["path"]).read_text())


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["val", "test"])
def test_dimension_table_holds_the_callbacks_values(
    offline: tuple[OfflineRun, FeatureStatistics], stage: str
) -> None:
    run, stats = offline
    row, table = _table(run, f"{stage}/z/dimensions")
    assert row["_type"] == "table-file" and row["nrows"] == D
    assert table["columns"] == [
        "dim", "EA", "activation frequency", "consistency", "majority class", "SEPIN",
        "top images",
    ]  # fmt: skip
    values = stats.dimensions[stage]
    assert sorted(r[0] for r in table["data"]) == list(range(D))
    eas = [r[1] for r in table["data"]]
    assert eas == sorted(eas, reverse=True)
    for rank, (dim, ea, freq, consistency, majority, sepin, image) in enumerate(table["data"]):
        assert ea == pytest.approx(values["ea"][dim].item())
        assert freq == pytest.approx(values["frequency"][dim].item())
        assert sepin == pytest.approx(values["sepin"][dim].item())
        if majority is None:
            assert consistency is None and values["majority_class"][dim] == -1
        else:
            assert consistency == pytest.approx(values["consistency"][dim].item())
            assert majority == values["majority_class"][dim]
        assert (image is not None) == (rank < TOP_DIMS)  # TopActivations' rows: top EA
    # W&B stores a table with media as a run_table artifact holding the images
    (path,) = run.folder.glob("run-*.wandb")
    artifacts = [
        r.artifact for r in read_records(path) if r.WhichOneof("record_type") == "artifact"
    ]
    name = f"{stage}zdimensions"
    (artifact,) = [a for a in artifacts if name in a.name]
    assert artifact.type == "run_table"
    files = [m.path for m in artifact.manifest.contents]
    assert 1 <= sum(f.endswith(".png") for f in files) <= TOP_DIMS  # equal images: one file


@pytest.mark.slow
def test_plot_reads_the_offline_run(offline: tuple[OfflineRun, Any], tmp_path: Path) -> None:
    run, _ = offline
    save = run.folder.parent.parent
    (curves,) = load_runs([save])
    assert curves.label == "dash" and curves.path.suffix == ".wandb"  # the run's name
    for key in ("train/loss", "val/z/semantic_consistency", "test/z/sepin@all"):
        rows = run.rows_with(key)
        expected = [(r["trainer/global_step"], r.get("epoch"), r[key]) for r in rows]
        got = [(p.step, p.epoch, p.value) for p in curves.series[key]]
        assert got == expected, key  # the same numbers of the same file
    assert not {k for k in curves.series if k.startswith("_") or k.endswith("/dimensions")}
    assert "val/z/top_activations" not in curves.series  # media are not curves
    out = tmp_path / "w.png"
    plot_main([str(run.folder), "--out", str(out), "--metrics", "train/loss", "val/online_acc"])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    python_api = plot_curves([save], tmp_path / "api.png", metrics=["train/loss"])
    assert python_api.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # the Python API reads it too


@pytest.mark.slow
def test_history_reader_stops_at_a_cut_and_refuses_other_files(
    offline: tuple[OfflineRun, Any], tmp_path: Path
) -> None:
    run, _ = offline
    (path,) = run.folder.glob("run-*.wandb")
    whole = read_history(path)
    cut = tmp_path / "run-cut.wandb"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size // 2 + 3])
    part = read_history(cut)
    assert 0 < sum(map(len, part.values())) < sum(map(len, whole.values()))
    for key, points in part.items():
        assert points == whole[key][: len(points)]
    other = tmp_path / "run-x.wandb"
    shutil.copyfile(Path(__file__), other)
    with pytest.raises(DataError, match="not a W&B run file"):
        read_history(other)
