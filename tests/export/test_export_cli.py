"""``python -m ncl_lightning.export``: a real ncl-cli run exported and loaded back, and the
command's one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from ncl_lightning import load_backbone
from ncl_lightning.export import main
from ncl_lightning.runtime.cli import cli_main
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory):
    """A tiny NCL digits run through the real entry point: ``(its model, its checkpoint)``."""
    root = tmp_path_factory.mktemp("run")
    cli = cli_main([
        "fit", "--config", str(ROOT / "configs/demo/digits_ncl.yaml"),
        "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2",
        "--trainer.limit_val_batches", "1", "--trainer.check_val_every_n_epoch", "1",
        "--trainer.default_root_dir", str(root), "--trainer.logger.init_args.save_dir", str(root),
        "--trainer.enable_progress_bar", "false", "--trainer.callbacks", "[]",
    ])  # fmt: skip
    (ckpt,) = root.rglob("*.ckpt")
    return cli.model, ckpt


@pytest.mark.slow
def test_a_run_exported_and_loaded_back_gives_the_same_features(trained, tmp_path: Path,
                                                                capsys) -> None:  # fmt: skip
    model, ckpt = trained
    out = main([str(ckpt), str(tmp_path / "export")])
    assert "Exported backbone:" in capsys.readouterr().out
    assert {p.name for p in out.iterdir()} == {"README.md", "config.json", "model.safetensors"}
    x = torch.rand(6, 1, 8, 8)
    with torch.no_grad():
        expected = model.backbone.cpu().eval()(x)
        assert torch.equal(load_backbone(out).eval()(x), expected)
        assert torch.equal(load_backbone(ckpt).eval()(x), expected)
    card = (out / "README.md").read_text()
    run = yaml.safe_load((ckpt.parent.parent / "run.yaml").read_text())
    commit = (run.get("git") or {}).get("ncl_lightning", {}).get("commit") or "not recorded"
    assert f"commit `{commit}`" in card
    assert "From the metrics.csv of the run folder" in card and "`val/knn_acc`" in card
    assert "`ncl_lightning.methods.ncl.NCL`: NCL: Non-negative Contrastive Learning" in card


def _error(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("python -m ncl_lightning.export: error: ")
    return err


def test_the_command_offers_the_formats_of_export_backbone() -> None:
    from ncl_lightning.checkpoints.export import EXPORT_FORMATS
    from ncl_lightning.export import FORMATS

    assert FORMATS == EXPORT_FORMATS


def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    assert "is a folder, not a checkpoint file" in _error([str(tmp_path), str(out)], capsys)
    assert "checkpoint: no such file" in _error([str(tmp_path / "x.ckpt"), str(out)], capsys)
    assert "format: invalid choice: 'onnx'" in _error(
        [str(tmp_path / "x.ckpt"), str(out), "--format", "onnx"], capsys
    )
    assert not out.exists()


@pytest.mark.slow
def test_a_full_folder_needs_overwrite(trained, tmp_path: Path, capsys) -> None:
    _, ckpt = trained
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert "exists and is not empty" in _error([str(ckpt), str(out)], capsys)
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    fresh = str(tmp_path / "fresh")
    assert "does not apply to SmallCNN" in _error([str(ckpt), fresh, "--format", "timm"], capsys)
    main([str(ckpt), str(out), "--overwrite", "--license", "apache-2.0"])
    assert "license: apache-2.0" in (out / "README.md").read_text()
    assert (out / "notes.txt").read_text() == "mine"
