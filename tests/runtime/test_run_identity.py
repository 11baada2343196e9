"""Runs that share a root keep apart: real ``ncl-cli`` fits on the bundled digits.

Regression tests of two collisions: two seeds in one root resumed each other's newest
``last.ckpt``, and a second W&B run replaced the first run's ``config.yaml`` (temperature
0.2 became 0.5: two W&B run ids, one config file).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import wandb
import yaml

from ncl_lightning.checkpoints.load import read_checkpoint
from ncl_lightning.runtime.cli import cli_main, main
from tests.helpers.wandb_run import read_records
from tests.resume_helpers import digits_run_config


def _config(tmp_path: Path, root: Path, wandb: bool = False) -> Path:
    cfg = digits_run_config(root, max_epochs=1)
    cfg["trainer"].update(limit_train_batches=2, limit_val_batches=1)
    cfg["trainer"]["callbacks"] = cfg["trainer"]["callbacks"][:1]  # ModelCheckpoint
    if wandb:
        cfg["trainer"]["logger"] = {
            "class_path": "ncl_lightning.runtime.loggers.WandbLogger",
            "init_args": {"project": "ncl-test", "save_dir": str(root), "offline": True},
        }
    path = tmp_path / ("wandb.yaml" if wandb else "csv.yaml")
    path.write_text(yaml.safe_dump(cfg))
    return path


def _refused(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as stop:
        main(args)
    assert stop.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.slow
def test_two_seeds_in_one_root_never_resume_each_other(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "runs"
    config = str(_config(tmp_path, root))
    for seed in (1, 2):
        cli_main(["fit", "--config", config, "--seed_everything", str(seed)])
    runs = root / "digits"
    lasts = {v: runs / v / "checkpoints/last.ckpt" for v in ("version_0", "version_1")}
    first = lasts["version_0"].read_bytes()
    for v, seed in (("version_0", 1), ("version_1", 2)):  # each run its own config
        assert yaml.safe_load((runs / v / "config.yaml").read_text())["seed_everything"] == seed
        assert yaml.safe_load((runs / v / "run.yaml").read_text())["id"] == v

    for flag in (["--ckpt_path", "last"], ["--auto_resume", "true"]):
        line = _refused(["fit", "--config", config, *flag], capsys)
        assert line.startswith("ncl-cli: error: ckpt_path: 2 runs under ")
        assert "version_0 (" in line and "version_1 (" in line and "--run_id <id>" in line

    resumed = cli_main(
        ["fit", "--config", config, "--run_id", "version_1", "--ckpt_path", "last",
         "--trainer.max_epochs", "2", "--seed_everything", "2"]
    )  # fmt: skip
    assert Path(resumed.trainer.ckpt_path) == lasts["version_1"].resolve()
    assert read_checkpoint(lasts["version_1"])["epoch"] == 1
    assert lasts["version_0"].read_bytes() == first  # the other run is untouched
    assert not (runs / "version_2").exists()
    # The resumed start wrote its config beside the first one's, not over it.
    assert (runs / "version_1/config.1.yaml").is_file()
    first_config = yaml.safe_load((runs / "version_1/config.yaml").read_text())
    assert first_config["trainer"]["max_epochs"] == 1

    # A new run may not take the id of an existing one.
    line = _refused(["fit", "--config", config, "--run_id", "version_0"], capsys)
    assert line.startswith("ncl-cli: error: run_id: run version_0 already exists")


@pytest.mark.slow
def test_runs_without_a_logger_get_their_own_folders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "runs"
    config = str(_config(tmp_path, root))
    plain = ["fit", "--config", config, "--trainer.logger", "false"]
    for _ in range(2):
        cli_main(plain)
    found = sorted(root.glob("run-*/checkpoints/last.ckpt"))
    assert len(found) == 2, found  # two runs, two folders: nothing shared, nothing replaced
    line = _refused([*plain, "--auto_resume", "true"], capsys)
    assert "2 runs under" in line and "ambiguous" in line
    first = found[0].parent.parent.name
    cli_main([*plain, "--run_id", first, "--ckpt_path", "last", "--trainer.max_epochs", "2"])
    assert read_checkpoint(found[0])["epoch"] == 1  # continued in its own folder
    assert len(list(root.glob("run-*"))) == 2


@pytest.mark.slow
def test_wandb_runs_in_one_root_keep_their_own_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    root = tmp_path / "runs"
    config = str(_config(tmp_path, root, wandb=True))
    ids = {}
    for temperature in (0.2, 0.5):
        args = ["--model.init_args.temperature", str(temperature)]
        cli = cli_main(["fit", "--config", config, *args])
        ids[temperature] = cli.trainer.logger.version
        wandb.finish()  # one process per run in real use; here the next run is a new one
    assert len(set(ids.values())) == 2
    for temperature, run_id in ids.items():
        folder = root / "ncl-test" / run_id
        saved = yaml.safe_load((folder / "config.yaml").read_text())
        assert saved["model"]["init_args"]["temperature"] == temperature
        assert (folder / "checkpoints/last.ckpt").is_file()
        (run_dir,) = (folder / "wandb").glob(f"offline-run-*-{run_id}")
        # W&B has the whole resolved config and the environment...
        config_keys: dict[str, str] = {}
        files: list[str] = []
        for record in read_records(run_dir / f"run-{run_id}.wandb"):
            kind = record.WhichOneof("record_type")
            if kind == "config":
                config_keys.update({u.key: u.value_json for u in record.config.update})
            elif kind == "files":
                files += [f.path for f in record.files.files]
        trainer = yaml.safe_load(config_keys["trainer"])
        assert trainer["max_epochs"] == 1 and trainer["callbacks"]
        assert yaml.safe_load(config_keys["seed_everything"]) == 3
        run = yaml.safe_load(config_keys["run"])
        assert run["id"] == run_id and run["versions"]["torch"] and "git" in run
        assert run["processes"]["world_size"] == 1
        # ... and a copy of the config file.
        assert "ncl_config.yaml" in files
        assert (run_dir / "files/ncl_config.yaml").read_text() == (
            folder / "config.yaml"
        ).read_text()
