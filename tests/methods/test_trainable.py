"""One training base: SSLMethod and Classifier sit directly on TrainableModule, no hook
depends on base order, and the default callbacks (guard, final validation) reach every
trainer through ``configure_callbacks``, without replacing a callback the user configured."""

from __future__ import annotations

import inspect
import pickle
from pathlib import Path

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import ncl_lightning
from ncl_lightning import methods
from ncl_lightning.callbacks import FeatureStatistics, FinalValidation
from ncl_lightning.checkpoints.load import read_checkpoint
from ncl_lightning.data import DigitsDataModule
from ncl_lightning.foundation.errors import UsageError
from ncl_lightning.methods import NCL, Classifier, NCEClassifier, SSLMethod, TrainableModule
from ncl_lightning.methods.guard import CHECKPOINT_KEY, NonFiniteGuard
from ncl_lightning.methods.trainable import common_arguments
from ncl_lightning.nn import SmallCNN
from ncl_lightning.runtime.cli import cli_main
from tests.conftest import ROOT

DEFAULT_TYPES = (NonFiniteGuard, FinalValidation)
HOOK_PREFIXES = ("on_", "configure_", "setup", "teardown", "state_dict", "load_state_dict")


def _ncl(**kw: object) -> NCL:
    torch.manual_seed(0)
    return NCL(
        SmallCNN(1, 8, 16), proj_hidden_dim=32, proj_output_dim=16, num_classes=10,
        batch_size=32, **kw,
    )  # fmt: skip


def _trainer(root: Path, callbacks: list[L.Callback] | None = None) -> L.Trainer:
    return L.Trainer(
        accelerator="cpu", max_epochs=1, limit_train_batches=1, limit_val_batches=1,
        limit_test_batches=1, limit_predict_batches=1, logger=False, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False, num_sanity_val_steps=0,
        default_root_dir=root, callbacks=callbacks,
    )  # fmt: skip


def _of_type(trainer: L.Trainer, kind: type) -> list[L.Callback]:
    return [c for c in trainer.callbacks if isinstance(c, kind)]


@pytest.mark.parametrize("base", [SSLMethod, Classifier])
def test_each_base_sits_directly_on_the_training_base(base: type) -> None:
    assert base.__mro__[1] is TrainableModule
    assert len(base.__mro__) - len(L.LightningModule.__mro__) <= 2


def _own_classes() -> list[type]:
    exported = [getattr(methods, name) for name in methods.__all__]
    return [c for c in exported if isinstance(c, type) and issubclass(c, L.LightningModule)]


@pytest.mark.parametrize("cls", _own_classes(), ids=lambda c: c.__name__)
def test_no_hook_relies_on_base_order(cls: type) -> None:
    """Between the class and LightningModule each hook is defined once, or every definition
    but the last (deepest) calls ``super()``: nothing works only because of where a base
    sits."""
    stop = cls.__mro__.index(L.LightningModule)
    own = cls.__mro__[:stop]
    hooks = [
        name for name in dir(L.LightningModule)
        if name.startswith(HOOK_PREFIXES) and callable(getattr(L.LightningModule, name))
    ]  # fmt: skip
    for name in hooks:
        definers = [c for c in own if name in vars(c)]
        for c in definers[:-1]:  # overridden further down: must chain
            assert "super()" in inspect.getsource(vars(c)[name]), f"{c.__name__}.{name}"
    bases = (TrainableModule, SSLMethod, Classifier)
    assert all(len(c.__bases__) == 1 for c in own if c in bases), "the bases take no mixins"


def test_plain_trainer_gets_every_default_and_keeps_the_users_guard(tmp_path: Path) -> None:
    mine = NonFiniteGuard()
    trainer = _trainer(tmp_path, [mine])
    trainer.fit(_ncl(), DigitsDataModule(batch_size=32, num_workers=0))
    for kind in (*DEFAULT_TYPES, FeatureStatistics):  # a self-supervised method's statistics
        assert len(_of_type(trainer, kind)) == 1, kind.__name__
    assert _of_type(trainer, NonFiniteGuard)[0] is mine  # configured instance not replaced
    trainer.save_checkpoint(tmp_path / "x.ckpt")
    ckpt = read_checkpoint(tmp_path / "x.ckpt")  # the record is there
    assert ckpt["ncl_lightning"]["method"].endswith(".NCL") and ckpt[CHECKPOINT_KEY] == 0


@pytest.mark.parametrize("stage", ["validate", "test", "predict"])
def test_plain_trainer_gets_the_defaults_outside_fit(stage: str, tmp_path: Path) -> None:
    trainer = _trainer(tmp_path)
    model = NCEClassifier(SmallCNN(1, 8, 16), num_classes=10, batch_size=32)
    if stage == "predict":
        loader = DataLoader(TensorDataset(torch.zeros(4, 1, 8, 8)), batch_size=2)
        trainer.predict(model, loader)
    else:
        getattr(trainer, stage)(model, DigitsDataModule(batch_size=32, num_workers=0, n_views=1))
    assert all(len(_of_type(trainer, kind)) == 1 for kind in DEFAULT_TYPES)
    assert not _of_type(trainer, FeatureStatistics)  # a classifier: no default statistics


def test_default_callbacks_are_fresh_and_complete() -> None:
    first, second = ncl_lightning.default_callbacks(), ncl_lightning.default_callbacks()
    assert [type(c) for c in first] == list(DEFAULT_TYPES)
    assert all(a is not b for a, b in zip(first, second, strict=True))


def test_guard_restores_the_skipped_count_from_a_checkpoint() -> None:
    guard = NonFiniteGuard()
    saved: dict[str, int] = {}
    guard.skipped_total = 3
    guard.on_save_checkpoint(None, None, saved)  # type: ignore[arg-type]
    fresh = NonFiniteGuard()
    fresh.on_load_checkpoint(None, None, saved)  # type: ignore[arg-type]
    assert fresh.skipped_total == 3


def _one_step_fit(tmp_path: Path, *extra: str):
    """``ncl-cli fit`` of one step on the digits NCE config; the CLI object is returned."""
    return cli_main([
        "fit", "--config", str(ROOT / "configs" / "demo" / "digits_nce.yaml"),
        "--trainer.default_root_dir", str(tmp_path), "--trainer.logger", "false",
        "--trainer.max_epochs", "1", "--trainer.max_steps", "1",
        "--trainer.limit_val_batches", "0", "--trainer.enable_progress_bar", "false",
        *extra,
    ])  # fmt: skip


def test_ncl_cli_installs_each_default_once(tmp_path: Path) -> None:
    cli = _one_step_fit(tmp_path)
    for kind in DEFAULT_TYPES:
        assert len(_of_type(cli.trainer, kind)) == 1, kind.__name__
    assert cli.model.checked  # the model's checks ran by the CLI, before fit


def test_a_default_the_config_lists_is_the_users_only(tmp_path: Path) -> None:
    cli = _one_step_fit(tmp_path, "--trainer.callbacks+=ncl_lightning.methods.guard.NonFiniteGuard")
    for kind in DEFAULT_TYPES:
        assert len(_of_type(cli.trainer, kind)) == 1, kind.__name__
    (guard,) = _of_type(cli.trainer, NonFiniteGuard)
    assert guard not in cli.trainer_defaults["callbacks"]  # the configured one, not ours


def test_the_guard_attaches_itself_and_a_trainer_without_one_is_refused(tmp_path: Path) -> None:
    model = _ncl()
    trainer = _trainer(tmp_path)
    trainer.fit(model, DigitsDataModule(batch_size=32, num_workers=0))
    (guard,) = _of_type(trainer, NonFiniteGuard)
    assert model.nonfinite_guard() is guard  # attached at setup, not looked up
    copied = pickle.loads(pickle.dumps(model))  # the guard is the trainer's: not pickled
    assert copied._finite.attached is None and model._finite.attached is guard
    model.trainer = _trainer(tmp_path)  # a trainer whose guard never attached
    with pytest.raises(UsageError, match=r"no NonFiniteGuard among trainer\.callbacks"):
        model.nonfinite_guard()


def test_common_arguments_are_the_training_base_arguments() -> None:
    """What the bases pass on (``methods.trainable.common_arguments``) is exactly what
    ``TrainableModule.__init__`` takes, whatever else the subclass's locals hold."""
    names = tuple(inspect.signature(TrainableModule.__init__).parameters)[1:]
    values = {name: object() for name in (*names, "self", "backbone", "temperature")}
    assert tuple(common_arguments(values)) == names
