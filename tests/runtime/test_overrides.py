"""Resuming with a fix: the values typed on the command line win over a checkpoint's
hyper-parameters, also in the restored optimiser, said once; a config file's differing
values do not (kept from the checkpoint, said once); and evaluating untrained weights
needs to be asked for."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml
from jsonargparse import Namespace

from ncl_lightning.runtime import overlay_explicit
from ncl_lightning.runtime.cli import cli_main, main
from ncl_lightning.runtime.resume import split_explicit, typed_model_keys
from tests.runtime.test_signals import digits_config


def test_overlay_puts_back_given_values_and_reports_differences() -> None:
    merged = Namespace(
        class_path="A",
        init_args=Namespace(
            lr=1.0, skip="stop", opt=Namespace(class_path="SGD", init_args=Namespace(m=0.9))
        ),
    )
    given = Namespace(
        init_args=Namespace(
            skip="skip", lr=1.0, opt=Namespace(class_path="LARS", init_args=Namespace(eta=0.02))
        )
    )
    changes = overlay_explicit(merged, given, "model.")
    assert changes == [
        ("model.init_args.skip", "stop", "skip"),
        ("model.init_args.opt", {"class_path": "SGD", "init_args": {"m": 0.9}},
         {"class_path": "LARS", "init_args": {"eta": 0.02}}),
    ]  # fmt: skip
    assert merged.init_args.skip == "skip" and merged.init_args.lr == 1.0
    assert merged.init_args.opt.as_dict() == {"class_path": "LARS", "init_args": {"eta": 0.02}}


def _fit(tmp_path: Path, *extra: str, command: str = "fit"):
    path = tmp_path / "run.yaml"
    config = digits_config(tmp_path / "run", max_epochs=1)
    config["trainer"]["callbacks"] = config["trainer"]["callbacks"][:1]
    config["trainer"]["limit_train_batches"] = 3
    config["trainer"]["limit_val_batches"] = 1
    config["model"]["init_args"]["optimizer"] = {
        "class_path": "ncl_lightning.optim.LARS",
        "init_args": {"lr": 0.4, "momentum": 0.9, "weight_decay": 1e-4},
    }
    config["trainer"]["limit_test_batches"] = 1
    config["model"]["init_args"]["temperature"] = 0.2
    path.write_text(yaml.safe_dump(config))
    return cli_main([command, "--config", str(path), *extra])


@pytest.mark.slow
def test_resume_with_a_fix_trains_with_the_fix(tmp_path: Path, caplog) -> None:
    # the notice goes through Lightning's logger (which another test may have quietened)
    caplog.set_level(logging.INFO, logger="lightning.pytorch")
    _fit(tmp_path)
    assert "the command line's values" not in caplog.text
    caplog.clear()
    cli = _fit(
        tmp_path,
        "--ckpt_path", "last", "--trainer.max_epochs", "2",
        "--model.init_args.nonfinite_loss", "skip",
        "--model.init_args.temperature", "0.3",
        "--model.init_args.optimizer.init_args.lr", "0.8",
        "--model.init_args.optimizer.init_args.weight_decay", "0.002",
    )  # fmt: skip
    said = [line for line in caplog.text.splitlines() if "the command line's values" in line]
    assert len(said) == 1, caplog.text
    for key in ("nonfinite_loss='skip' (checkpoint: 'stop')", "temperature=0.3",
                "optimizer.init_args.lr=0.8", "weight_decay=0.002"):  # fmt: skip
        assert key in said[0]
    model = cli.model
    assert model.hparams.nonfinite_loss == "skip" and model.hparams.temperature == 0.3
    # after the optimiser state was restored: this run's base lr (0.8 x 64/256) and decay
    groups = cli.trainer.optimizers[0].param_groups
    assert groups[0]["initial_lr"] == pytest.approx(0.8 * 64 / 256)
    assert groups[0]["weight_decay"] == pytest.approx(0.002)
    scheduler = cli.trainer.lr_scheduler_configs[0].scheduler
    assert scheduler.base_lrs[0] == pytest.approx(0.8 * 64 / 256)


@pytest.mark.slow
def test_config_file_values_never_replace_the_checkpoints(tmp_path: Path, caplog) -> None:
    """Trained with ``--model.init_args.temperature 0.5`` over the file's 0.2: resuming or
    testing with the same file keeps 0.5 (said once), and ``test`` never says it resumes."""
    caplog.set_level(logging.INFO, logger="lightning.pytorch")
    _fit(tmp_path, "--model.init_args.temperature", "0.5")
    for command, verb in (("fit", "Resuming"), ("test", "Testing")):
        caplog.clear()
        cli = _fit(tmp_path, "--ckpt_path", "last", "--trainer.max_epochs", "2", command=command)
        assert cli.model.hparams.temperature == 0.5
        said = [line for line in caplog.text.splitlines() if "config file's" in line]
        assert len(said) == 1, caplog.text
        assert f"{verb} " in said[0]
        assert "model.init_args.temperature=0.5 (config file: 0.2)" in said[0]
        assert "command line" in said[0]
        assert command == "fit" or "Resuming" not in caplog.text
    folder = tmp_path / "run" / "digits" / "version_0"
    assert yaml.safe_load((folder / "config.1.yaml").read_text())["model"]["init_args"][
        "temperature"
    ] == 0.5


@pytest.mark.slow
def test_test_without_a_checkpoint_is_refused_unless_asked(tmp_path: Path, capsys) -> None:
    path = tmp_path / "run.yaml"
    config = digits_config(tmp_path / "run", max_epochs=1)
    config["trainer"]["callbacks"] = []
    config["trainer"]["limit_test_batches"] = 1
    config["model"]["init_args"]["temperature"] = 0.2
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(SystemExit) as exit_info:
        main(["test", "--config", str(path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "untrained weights" in err[0] and "--allow_untrained" in err[0]
    assert not (tmp_path / "run").exists()
    cli = cli_main(["test", "--config", str(path), "--allow_untrained", "true"])
    assert "test/online_acc" in cli.trainer.callback_metrics


def test_only_keys_typed_on_the_command_line_count_as_typed() -> None:
    """``--model.checkpoint`` is jsonargparse's short form of ``--model.init_args.checkpoint``
    (at every nested class too); config-file values stay on the file side."""
    argv = ["fit", "--config", "c.yaml", "--model.checkpoint", "x.ckpt",
            "--model.init_args.optimizer.lr=0.1", "--trainer.max_epochs", "2"]  # fmt: skip
    typed = typed_model_keys(argv)
    assert typed == ["checkpoint", "init_args.optimizer.lr"]
    assert typed_model_keys(["fit", "--model", "NCL"]) is None  # the whole model
    assert typed_model_keys({"model": {}}) is None  # from Python: everything is typed
    given = Namespace(
        class_path="P",
        init_args=Namespace(
            checkpoint="x.ckpt", temperature=0.2,
            optimizer=Namespace(class_path="SGD", init_args=Namespace(lr=0.1, momentum=0.9)),
        ),
    )  # fmt: skip
    cli, files = split_explicit(given, typed)
    assert cli.as_dict() == {"init_args": {"checkpoint": "x.ckpt",
                                           "optimizer": {"init_args": {"lr": 0.1}}}}  # fmt: skip
    assert files.init_args.temperature == 0.2 and "checkpoint" not in files.init_args
    assert files.init_args.optimizer.init_args.as_dict() == {"momentum": 0.9}
    # typed twice, and a class typed whole with one of its keys (--model.optimizer SGD
    # --model.optimizer.lr 0.1): no key is lost, none is left on the file side
    twice = ["checkpoint", "checkpoint", "optimizer", "optimizer.lr"]
    cli, files = split_explicit(given, twice)
    assert cli.init_args.optimizer.as_dict() == given.init_args.optimizer.as_dict()
    assert "optimizer" not in files.init_args and "checkpoint" not in files.init_args
