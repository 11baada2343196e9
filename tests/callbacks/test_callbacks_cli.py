"""FeatureStatistics and TopActivations inside real ``ncl-cli fit`` / ``test`` runs.

Runs on the real CIFAR-10 images (skipped where the shared subset is absent). A small
backbone keeps each epoch short on 2 CPU cores; the data path, method, callbacks and
loggers are the real ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from ncl_lightning.callbacks import TopActivations
from ncl_lightning.plot.pictures import DPI, FIGSIZE, grid_size
from ncl_lightning.runtime.cli import cli_main, main
from tests.conftest import ROOT

METRICS = [
    "sparsity", "active_dims", "dead_dims", "activation_rate", "orthogonality_error",
    "effective_rank", "ea_max", "ea_top10_share", "semantic_consistency",
    "semantic_consistency_top100", "semantic_entropy", "semantic_entropy_freq",
    "semantic_entropy_mean_activation", "retrieval_p@10",
]  # fmt: skip
SEPIN_KEYS = ["sepin@1", "sepin@10", "sepin@100", "sepin@all"]


def _args(config: str, subset: Path, out: Path, *extra: str) -> list[str]:
    return [
        "--config", str(ROOT / "configs" / config),
        "--data", "ncl_lightning.data.ImageFolderDataModule",
        "--data.root", str(subset),
        "--data.batch_size", "64",
        "--data.num_workers", "2",
        "--model.init_args.backbone", "ncl_lightning.nn.SmallCNN",
        "--model.init_args.backbone.in_channels", "3",
        "--model.init_args.backbone.width", "32",
        "--trainer.accelerator", "cpu",
        "--trainer.devices", "1",
        "--trainer.precision", "32-true",  # bf16 autocast is slow on the CPU; not under test here
        "--trainer.default_root_dir", str(out),
        "--trainer.logger", "lightning.pytorch.loggers.CSVLogger",
        "--trainer.logger.save_dir", str(out),
        "--trainer.enable_progress_bar", "false",
        # a few batches: 128 images per split cover top_k 100 and 10 pictures per row
        "--trainer.limit_train_batches", "2",
        "--trainer.limit_val_batches", "2",
        "--trainer.limit_test_batches", "2",
        "--trainer.num_sanity_val_steps", "0",
        *extra,
    ]  # fmt: skip


def _pictures_ok(paths: dict[str, Path], rows: int, cols: int, cell: int) -> None:
    assert set(paths) == {"top_activations", "heatmap", "correlation", "ea_curve"}
    for name, path in paths.items():
        assert path.is_file() and path.stat().st_size > 1000, name
        with Image.open(path) as im:
            im.verify()
        with Image.open(path) as im:
            expected = (
                grid_size(rows, cols, cell)
                if name == "top_activations"
                else (round(FIGSIZE[0] * DPI), round(FIGSIZE[1] * DPI))
            )
            assert im.size == expected, (name, im.size)
            assert len(set(im.convert("L").getdata())) > 10, f"{name} is blank"


@pytest.mark.slow
def test_callbacks_in_fit_and_test_on_real_cifar(cifar_subset: Path, tmp_path: Path) -> None:
    # the config's FeatureStatistics and TopActivations run at the last epoch
    extra = ["--trainer.max_epochs", "1"]
    fit = cli_main(["fit", *_args("cifar10_ncl.yaml", cifar_subset, tmp_path, *extra)])
    logged = fit.trainer.callback_metrics
    for space in ("z", "h"):
        missing = [m for m in METRICS if f"val/{space}/{m}" not in logged]
        assert not missing, f"val/{space}: missing {missing}"
    assert all(f"val/z/{k}" in logged for k in SEPIN_KEYS)
    assert 0.0 < float(logged["val/z/sparsity"]) < 1.0  # NCL: some exact zeros
    drawers = [c for c in fit.trainer.callbacks if isinstance(c, TopActivations)]
    _pictures_ok(drawers[-1].last_paths, rows=10, cols=10, cell=64)
    assert drawers[-1].last_paths["top_activations"].parent.name == "pictures"

    (ckpt,) = tmp_path.rglob("last.ckpt")
    test = cli_main(["test", *_args("cifar10_ncl.yaml", cifar_subset, tmp_path / "test"),
                     "--ckpt_path", str(ckpt)])  # fmt: skip
    results = test.trainer.callback_metrics
    assert all(f"test/z/{m}" in results for m in METRICS + SEPIN_KEYS)
    assert all(f"test/h/{m}" in results for m in METRICS)
    assert "test/online_acc" in results
    test_pics = [c for c in test.trainer.callbacks if isinstance(c, TopActivations)][-1].last_paths
    _pictures_ok(test_pics, rows=10, cols=10, cell=64)


@pytest.mark.parametrize(
    ("callback", "culprit"),
    [("TopActivations", "images to draw"), ("FeatureStatistics", "view_dataloader()")],
)
def test_data_a_callback_cannot_use_is_refused_before_the_first_step(
    callback: str, culprit: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Sparse-coding data has no images to draw and no view pairs for SEPIN: the fit stops
    at setup with one line naming the callback and the missing part, exit 2, nothing kept."""
    out = tmp_path / "out"
    args = ["fit", "--config", str(ROOT / "configs" / "ground_truth" / "sparse_coding_ncl.yaml"),
            "--trainer.default_root_dir", str(out), "--trainer.logger.init_args.save_dir",
            str(out), "--trainer.max_epochs", "1", "--trainer.check_val_every_n_epoch", "1",
            f"--trainer.callbacks+=ncl_lightning.callbacks.{callback}"]  # fmt: skip
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    errors = [x for x in capsys.readouterr().err.splitlines() if x.startswith("ncl-cli: error:")]
    assert len(errors) == 1 and callback in errors[0] and culprit in errors[0], errors
    assert not any(p.is_file() for p in out.rglob("*")), sorted(out.rglob("*"))
