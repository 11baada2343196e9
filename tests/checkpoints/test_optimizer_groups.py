"""A fit resuming a checkpoint whose optimizer groups no longer fit the method is refused in
one line before the optimizer state is loaded (not by torch's ``load_state_dict``), and
only a fit is: evaluating such a checkpoint reads its weights as before."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from ncl_lightning import CheckpointError, load_method
from ncl_lightning.checkpoints.optimizer_groups import (
    OptimizerGroupsCheck,
    check_optimizer_groups,
    saved_group_sizes,
)
from ncl_lightning.methods import BayesNCL
from ncl_lightning.runtime.cli import cli_main, main

ROOT = Path(__file__).resolve().parents[2]
BAYESNCL = str(ROOT / "configs" / "demo" / "digits_bayesncl.yaml")


def _optimizer(*sizes: int) -> torch.optim.Optimizer:
    groups = [{"params": [nn.Parameter(torch.zeros(1)) for _ in range(n)]} for n in sizes]
    return torch.optim.SGD(groups, lr=0.1)


def test_saved_sizes_of_every_optimizer() -> None:
    a, b = _optimizer(2, 3), _optimizer(1)
    ckpt = {"optimizer_states": [a.state_dict(), b.state_dict()]}
    assert saved_group_sizes(ckpt) == [[2, 3], [1]]
    assert saved_group_sizes({"optimizer_states": []}) is None  # weights-only save
    assert saved_group_sizes({}) is None


def test_a_different_group_count_or_size_is_one_line_naming_both() -> None:
    model = nn.Linear(1, 1)
    check_optimizer_groups([[2, 3]], [_optimizer(2, 3)], model, "a.ckpt")  # fits
    with pytest.raises(CheckpointError, match=r"^ckpt_path: a\.ckpt holds state for the "
                       r"optimizer with 1 parameter groups of sizes \[5\], but Linear now "
                       r"builds 2 of sizes \[2, 3\]") as err:  # fmt: skip
        check_optimizer_groups([[5]], [_optimizer(2, 3)], model, "a.ckpt")
    assert "\n" not in str(err.value) and "--new_run true restores" in str(err.value)
    with pytest.raises(CheckpointError, match=r"optimizer 1 with 1 parameter groups of sizes "
                       r"\[2\], but Linear now builds 1 of sizes \[1\]"):  # fmt: skip
        check_optimizer_groups([[1], [2]], [_optimizer(1), _optimizer(1)], model, "a.ckpt")


class _Trainer:
    def __init__(self, *optimizers: torch.optim.Optimizer) -> None:
        self.optimizers = list(optimizers)


def test_the_fit_start_check_compares_the_built_optimizers() -> None:
    ckpt = {"optimizer_states": [_optimizer(4).state_dict()]}
    check = OptimizerGroupsCheck(ckpt, "x.ckpt")
    with pytest.raises(CheckpointError, match=r"x\.ckpt .* sizes \[4\], but Linear now builds 2"):
        check.on_fit_start(_Trainer(_optimizer(2, 2)), nn.Linear(1, 1))
    check.on_fit_start(_Trainer(_optimizer(4)), nn.Linear(1, 1))  # fits: nothing said
    OptimizerGroupsCheck({}, "w.ckpt").on_fit_start(_Trainer(_optimizer(1)), nn.Linear(1, 1))


def test_an_older_record_is_checked_by_the_configs_optimizer_class() -> None:
    """Checkpoints written before the record named its optimizers: the ``optimizer`` class
    path of the hyper-parameters (the first optimizer) decides, as before torch's KeyError."""
    adam = torch.optim.Adam([nn.Parameter(torch.zeros(1))])
    ckpt = {
        "optimizer_states": [_optimizer(1).state_dict()],
        "hyper_parameters": {"optimizer": {"class_path": "torch.optim.SGD", "init_args": {}}},
    }
    with pytest.raises(CheckpointError, match=r"^ckpt_path: old\.ckpt holds the state of a "
                       r"torch\.optim\.SGD optimizer, but this fit builds a "
                       r"torch\.optim\.adam\.Adam"):  # fmt: skip
        OptimizerGroupsCheck(ckpt, "old.ckpt").on_fit_start(_Trainer(adam), nn.Linear(1, 1))
    OptimizerGroupsCheck(ckpt, "old.ckpt").on_fit_start(_Trainer(_optimizer(1)), nn.Linear(1, 1))
    no_spec = {"optimizer_states": ckpt["optimizer_states"], "hyper_parameters": {}}
    OptimizerGroupsCheck(no_spec, "old.ckpt").on_fit_start(_Trainer(adam), nn.Linear(1, 1))


def _fit_args(root: Path, *extra: str) -> list[str]:
    return [
        "fit", "--config", BAYESNCL, "--trainer.max_epochs", "1",
        "--trainer.limit_train_batches", "1", "--trainer.limit_val_batches", "0",
        "--trainer.enable_progress_bar", "false", "--trainer.default_root_dir", str(root),
        "--trainer.logger.init_args.save_dir", str(root), *extra,
    ]  # fmt: skip


def _one_group_fewer(path: Path) -> None:
    """What a BayesNCL checkpoint written before the gating head's weights and biases had
    groups of their own holds: the gate's parameters in one group (4 groups, not 5)."""
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    groups = ckpt["optimizer_states"][0]["param_groups"]
    assert len(groups) == 5
    last = groups.pop()
    groups[-1]["params"] = groups[-1]["params"] + last["params"]
    torch.save(ckpt, path)


@pytest.mark.slow
def test_resuming_a_checkpoint_with_one_group_fewer_is_refused_before_training(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    cli_main(_fit_args(tmp_path))
    (path,) = tmp_path.rglob("last.ckpt")
    adam = ["--model.init_args.optimizer", "torch.optim.Adam"]  # another optimizer class
    with pytest.raises(SystemExit) as exit_info:  # was torch's KeyError: 'step'
        main(_fit_args(tmp_path, "--trainer.max_epochs", "2", "--ckpt_path", str(path), *adam))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"ncl-cli: error: ckpt_path: {path} holds the state of a " in err, err
    assert "optimizer, but this fit builds a torch.optim.adam.Adam" in err, err
    _one_group_fewer(path)
    written = path.read_bytes()
    resume = ["--trainer.max_epochs", "2", "--ckpt_path", str(path)]
    for extra in ([], ["--new_run", "true"]):
        with pytest.raises(CheckpointError) as err:
            cli_main(_fit_args(tmp_path, *resume, *extra))
        message = str(err.value)
        assert message.startswith(f"ckpt_path: {path} holds state for the optimizer with 4 "
                                  "parameter groups of sizes [")  # fmt: skip
        assert "but BayesNCL now builds 5 of sizes [" in message and "\n" not in message
        assert "--new_run true restores the optimizer state too" in message
        assert f"ncl_lightning.load_method({str(path)!r})" in message
    # nothing trained, nothing left behind: the run's file as it was, no new run's folder
    assert path.read_bytes() == written
    assert [p.name for p in (tmp_path / "digits_bayesncl").glob("version_*")] == ["version_0"]
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:  # ncl-cli: one line, status 2
        main(_fit_args(tmp_path, *resume))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"ncl-cli: error: ckpt_path: {path} holds" in err
    # Evaluating it reads the weights only: not refused.
    validate = ["validate", *_fit_args(tmp_path)[1:], "--ckpt_path", str(path)]
    validate[validate.index("--trainer.limit_val_batches") + 1] = "1"
    cli_main(validate)
    # The remedy the message gives: the weights, as a module to fit afresh.
    assert isinstance(load_method(path), BayesNCL)
