"""A quiet W&B run (issue 47, items 6 and 7): what a user sees and finds after ``ncl-cli
fit`` and ``ncl-cli test`` with the W&B logger offline, run through the installed console
script in a folder that is not a git checkout, with wandb's own messages on (the tests'
``WANDB_SILENT`` is removed) and the paper configs' ``bf16-mixed`` precision."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import wandb
import yaml

from tests.conftest import ROOT

DEMO = ROOT / "configs" / "demo" / "digits_ncl.yaml"
NAME = "digits_wandb"  # the run's name, not the save_dir's ("runs") nor the project's
SHORT = [
    "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2",
    "--trainer.limit_val_batches", "1", "--trainer.limit_test_batches", "1",
    "--trainer.num_sanity_val_steps", "0", "--trainer.enable_progress_bar", "false",
]  # fmt: skip


@dataclass
class Ran:
    """One command's output."""

    stdout: str
    stderr: str

    @property
    def text(self) -> str:
        return self.stdout + self.stderr


@dataclass
class QuietRun:
    """A fit and a test of its last checkpoint, in ``cwd``; the fit's run folder."""

    cwd: Path
    run: Path
    fit: Ran
    test: Ran


def _ncl_cli(*args: str, cwd: Path) -> Ran:
    script = Path(sys.executable).with_name("ncl-cli")
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_SILENT", "PYTHONPATH")}
    env["WANDB_MODE"] = "offline"
    done = subprocess.run([str(script), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return Ran(done.stdout, done.stderr)


@pytest.fixture(scope="module")
def quiet_run(tmp_path_factory: pytest.TempPathFactory) -> QuietRun:
    cwd = tmp_path_factory.mktemp("quiet")  # not a git checkout; runs/ does not exist yet
    assert subprocess.run(["git", "-C", str(cwd), "rev-parse"], capture_output=True).returncode
    config = yaml.safe_load(DEMO.read_text())
    config["trainer"]["precision"] = "bf16-mixed"  # as the paper configs
    config["trainer"]["default_root_dir"] = "runs"
    config["trainer"]["logger"] = {
        "class_path": "ncl_lightning.runtime.loggers.WandbLogger",
        "init_args": {"project": "ncl-lightning", "name": NAME, "save_dir": "runs"},
    }
    (cwd / "config.yaml").write_text(yaml.safe_dump(config))
    # ncl-cli started by a process that used wandb (a notebook, a script) inherits its
    # service (WANDB_SERVICE), whose working directory is not ncl-cli's: the run's files
    # still belong in the run's folder (they went to the service's working directory)
    wandb.init(mode="offline", dir=str(tmp_path_factory.mktemp("parent"))).finish()
    assert "WANDB_SERVICE" in os.environ
    fit = _ncl_cli("fit", "--config", "config.yaml", *SHORT, cwd=cwd)
    (run,) = (p.parent.parent for p in (cwd / "runs").glob(f"{NAME}/*/checkpoints/last.ckpt"))
    last = run / "checkpoints" / "last.ckpt"
    test = _ncl_cli("test", "--config", "config.yaml", *SHORT, "--ckpt_path", str(last), cwd=cwd)
    return QuietRun(cwd, run, fit, test)


@pytest.mark.slow
def test_no_git_warning_outside_a_git_checkout(quiet_run: QuietRun) -> None:
    """wandb looks for a git checkout from the run's ``dir``; it warned 'git root runs does
    not exist' while the folder did not exist yet (item 6)."""
    for ran in (quiet_run.fit, quiet_run.test):
        assert "git root" not in ran.text
        assert "git repo" not in ran.text


@pytest.mark.slow
def test_the_model_summary_has_no_flops_column(quiet_run: QuietRun) -> None:
    """Lightning's summary filled a FLOPs column with zeros (it counts them only from an
    ``example_input_array``); ncl-cli's table has none (item 6)."""
    lines = quiet_run.fit.text.splitlines()
    (header,) = [line for line in lines if "| Name" in line]
    assert [cell.strip() for cell in header.split("|")] == ["", "Name", "Type", "Params", "Mode"]
    assert "backbone" in quiet_run.fit.text and "Total params" in quiet_run.fit.text
    assert "FLOPs" not in quiet_run.fit.text and "Total Flops" not in quiet_run.fit.text


@pytest.mark.slow
def test_no_model_summary_warning_under_bf16_mixed(quiet_run: QuietRun) -> None:
    """Lightning's summary warned on every bf16-mixed fit that it cannot size the model (it
    knows no mixed precision); the parameters are float32 then, as the table says (item 6)."""
    assert "is not supported by the model summary" not in quiet_run.fit.text
    (size,) = [line for line in quiet_run.fit.text.splitlines() if "params size (MB)" in line]
    (total,) = [line for line in quiet_run.fit.text.splitlines() if line[10:] == "Total params"]
    assert total.startswith("124 K")  # the demo's NCL: SmallCNN(width 32), projector, probe
    assert size.split()[0] == "0.497"  # 124,233 float32 parameters


def test_the_summary_follows_the_trainer_settings() -> None:
    """``enable_model_summary: false`` turns the table off; a ``ModelSummary`` callback in the
    config is Lightning's own summary, kept as given."""
    from lightning.pytorch.callbacks import ModelSummary

    from ncl_lightning.runtime.console import ModelTable, summary_callbacks

    assert [type(c) for c in summary_callbacks({})] == [ModelTable]
    assert summary_callbacks({"enable_model_summary": False}) == []
    assert summary_callbacks({"barebones": True}) == []
    assert summary_callbacks({"callbacks": [ModelSummary(max_depth=2)]}) == []


@pytest.mark.slow
def test_plot_follows_the_run_folder_and_names_the_run(quiet_run: QuietRun) -> None:
    """``python -m ncl_lightning.plot <run folder>`` (the folder ncl-cli prints) finds the
    run's W&B file, and its legend is the run's name, not the save_dir's (item 7)."""
    folder = quiet_run.run.relative_to(quiet_run.cwd)
    assert f"run folder: {folder}" in quiet_run.fit.text
    done = subprocess.run(
        [sys.executable, "-m", "ncl_lightning.plot", str(folder), "--out", "curves.png"],
        cwd=quiet_run.cwd, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"curves.png: 1 run(s) ({NAME}), x = step"), done.stdout


@pytest.mark.slow
def test_the_wandb_config_holds_each_setting_once(quiet_run: QuietRun) -> None:
    """The W&B config is ncl-cli's whole config and the run record: ``model.init_args.
    temperature``, not also ``temperature`` from the module's hyper-parameters, which
    Lightning logged after it (item 7)."""
    from tests.helpers.wandb_run import read_records

    files = sorted((quiet_run.cwd / "runs").glob("**/offline-run-*/run-*.wandb"))
    assert len(files) == 2  # the fit's and the test's
    for path in files:
        run_id = path.stem.removeprefix("run-")
        own = quiet_run.run if run_id == quiet_run.run.name else quiet_run.run / "test" / run_id
        recorded = yaml.safe_load((own / "config.yaml").read_text())
        keys: list[str] = []
        for record in read_records(path):
            if record.WhichOneof("record_type") == "config":
                keys += [u.key for u in record.config.update if not u.key.startswith("_")]
        assert sorted(keys) == sorted([*recorded, "run"])  # each once, none flat
        assert "temperature" not in keys and "model" in keys


@pytest.mark.slow
def test_a_runs_wandb_files_are_in_its_folder(quiet_run: QuietRun) -> None:
    """A fit's W&B files are in its run folder, ``<run>/wandb/``, beside its checkpoints;
    a test of its checkpoint keeps its own in its own folder, ``<run>/test/<id>/wandb/``;
    nothing lies beside the run folder (item 7: the fit's went to ``<save_dir>/wandb/``, the
    test's into the run folder). The sync hint names the run's wandb folder."""
    runs, run = quiet_run.cwd / "runs", quiet_run.run
    assert sorted(p.name for p in runs.iterdir()) == [NAME]
    assert sorted(p.name for p in (runs / NAME).iterdir()) == [run.name]
    assert len(list(run.glob(f"wandb/offline-run-*-{run.name}/run-{run.name}.wandb"))) == 1
    (test,) = run.glob("test/*/wandb/offline-run-*/run-*.wandb")
    test_run = test.parent.parent.parent
    assert test.name == f"run-{test_run.name}.wandb" and (test_run / "config.yaml").is_file()
    folder = run.relative_to(quiet_run.cwd)
    assert f"sync later with: wandb sync {folder / 'wandb'}\n" in quiet_run.fit.text
    assert f"sync later with: wandb sync {test_run.relative_to(quiet_run.cwd) / 'wandb'}\n" in (
        quiet_run.test.text
    )
