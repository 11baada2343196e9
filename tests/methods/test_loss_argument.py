"""The ``loss`` argument and ``default_loss``: what a subclass declares is what ncl-cli trains,
and a default set through ``**kwargs`` (which the CLI would override) is one clear error."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.losses import InfoNCELoss, SpectralContrastiveLoss
from ncl_lightning.methods import CL, NCL
from ncl_lightning.methods.subclass_defaults import (
    check_declared_defaults,
    check_model_defaults,
    undeclared_defaults,
)
from ncl_lightning.nn import SmallCNN
from ncl_lightning.runtime.cli import cli_main, main
from tests.conftest import ROOT
from tests.methods import loss_subclasses as subs

DEMO = ROOT / "configs" / "demo" / "digits_ncl.yaml"


def _build(cls: type, **kw) -> CL:
    return cls(
        SmallCNN(in_channels=1, width=8, out_dim=16), proj_hidden_dim=32, proj_output_dim=12, **kw
    )


def _fit_args(config: Path, model: str, tmp_path: Path) -> list[str]:
    return [
        "fit", "--config", str(config), "--model", model,
        "--trainer.fast_dev_run", "1", "--trainer.enable_progress_bar", "false",
        "--trainer.default_root_dir", str(tmp_path), "--trainer.logger", "false",
        "--trainer.callbacks", "[]",
    ]  # fmt: skip


def _demo_without_loss(tmp_path: Path) -> Path:
    """The demo config with no ``loss`` key: the class decides."""
    cfg = yaml.safe_load(DEMO.read_text())
    del cfg["model"]["init_args"]["loss"]
    path = tmp_path / "no_loss.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_the_class_default_is_what_the_cli_trains(tmp_path: Path) -> None:
    """Through the real CLI, one optimiser step: the subclass's ``default_loss`` is built and
    trained (the spectral loss, not the parent's InfoNCE)."""
    cli = cli_main(
        _fit_args(_demo_without_loss(tmp_path), f"{subs.__name__}.SpectralByDefault", tmp_path)
    )
    assert cli.model.hparams.loss is None
    assert isinstance(cli.model.loss_fn, SpectralContrastiveLoss)
    assert cli.trainer.global_step == 1


def test_a_config_loss_over_a_class_default_is_said(tmp_path: Path) -> None:
    """The demo config names ``loss: info_nce``; on a subclass declaring another default the
    config wins (an explicit choice) and a warning says so and how to train the default."""
    model = _build(subs.SpectralByDefault)
    assert isinstance(model.loss_fn, SpectralContrastiveLoss)
    with pytest.warns(
        UserWarning,
        match=r"loss 'info_nce' from the config replaces the class default_loss 'spectral'",
    ):
        model = _build(subs.SpectralByDefault, loss="info_nce")
    assert isinstance(model.loss_fn, InfoNCELoss)


@pytest.mark.parametrize(
    ("name", "key", "fix"),
    [
        ("SpectralBySetdefault", "loss", "set the class attribute `default_loss = <name>`"),
        ("WarmerBySetdefault", "temperature", "declare `temperature` with its default in"),
    ],
)
def test_a_default_through_kwargs_stops_the_cli_with_one_line(
    name: str, key: str, fix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stop:
        main(_fit_args(DEMO, f"{subs.__name__}.{name}", tmp_path))
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ncl-cli: error:"), err
    assert f"{name}.__init__ defaults {key!r} through **kwargs" in err[0] and fix in err[0]
    assert not list(tmp_path.iterdir()), "nothing is written before the error"


def test_the_checks_read_only_undeclared_defaults() -> None:
    assert undeclared_defaults(subs.SpectralBySetdefault) == ("loss",)
    assert undeclared_defaults(subs.WarmerBySetdefault) == ("temperature",)
    for declared in (subs.WarmerByDeclaration, subs.SpectralByDefault, NCL, CL):
        assert undeclared_defaults(declared) == ()
        check_declared_defaults(declared, CL)
    with pytest.raises(ConfigError) as err:
        check_declared_defaults(subs.SpectralBySetdefault, CL)
    assert err.value.key == "loss"
    assert _build(subs.WarmerByDeclaration).hparams.temperature == 0.5


def test_a_default_through_kwargs_works_from_python() -> None:
    """Only ncl-cli ignores such a default: a module built in Python is not refused, and
    the check the CLI makes on the model it builds refuses it."""
    spectral = _build(subs.SpectralBySetdefault)
    assert isinstance(spectral.loss_fn, SpectralContrastiveLoss)
    assert _build(subs.WarmerBySetdefault).hparams.temperature == 0.5
    with pytest.raises(ConfigError, match="defaults 'loss' through \\*\\*kwargs") as err:
        check_model_defaults(spectral)
    assert err.value.key == "loss"
    check_model_defaults(_build(subs.WarmerByDeclaration))
    check_model_defaults(torch.nn.Linear(1, 1))  # not a trainable module: not checked


def test_loss_none_is_the_class_default_and_objective_is_renamed() -> None:
    assert isinstance(_build(CL).loss_fn, InfoNCELoss)
    assert isinstance(_build(CL, loss="spectral").loss_fn, SpectralContrastiveLoss)
    with pytest.raises(ConfigError, match="objective: this argument is now called loss") as err:
        _build(CL, objective="info_nce")
    assert err.value.key == "objective"
    z = torch.randn(4, 12)
    loss = _build(CL, loss=SpectralContrastiveLoss(gather_distributed=False))
    assert loss.loss_fn(z, z).item() < 0  # a module is used as given
