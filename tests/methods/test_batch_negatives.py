"""Issue 33, finding 12: a contrastive loss needs other images in its batch. A batch of one
image (or a last batch of one with ``drop_last: false``) is refused before anything is
written, counting the processes whose batches the loss gathers; methods without
negatives (BYOL, SimSiam) are left alone. Also (finding 11b): a temperature whose scale
float32 cannot hold is refused up front, naming the temperature."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.methods import BYOL, CL, NCL, SupConCL
from ncl_lightning.methods.preflight import check_batch_negatives
from ncl_lightning.nn import SmallCNN
from tests.helpers.cli import refused_fit


def test_batch_of_one_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    line = refused_fit("digits_ncl", ["--data.init_args.batch_size", "1"], tmp_path, capsys)
    assert line == (
        "ncl-cli: error: data.init_args.batch_size=1: NCL's loss contrasts each image with "
        "the other images of its batch, and a batch of 1 has none; set "
        "data.init_args.batch_size >= 2"
    )


def test_a_last_batch_of_one_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """1437 digits training images in batches of 4: the last holds 1."""
    extra = ["--data.init_args.batch_size", "4", "--data.init_args.drop_last", "false"]
    line = refused_fit("digits_ncl", extra, tmp_path, capsys)
    assert "data.init_args.drop_last: false leaves a last training batch of 1 image(s) " in line
    assert "(1437 samples, batch_size=4)" in line


def test_temperature_too_small_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    line = refused_fit("digits_ncl", ["--model.init_args.temperature", "1e-30"], tmp_path, capsys)
    assert line == (
        "ncl-cli: error: model.init_args.temperature=1e-30 is too small: the loss and its "
        "gradients scale as 1/temperature = 1e+30, and below 5.4e-20 their squared norm "
        "overflows float32 at the first step; the papers train at 0.05 to 0.5"
    )


def _data(batch_size: int, drop_last: bool = True, samples: int = 1000, scope: str = "device"):
    return SimpleNamespace(
        batch_size=batch_size, batch_scope=scope, drop_last=drop_last,
        split_size=lambda split: samples,
    )  # fmt: skip


def _model(cls: type = NCL, **kw):
    return cls(SmallCNN(in_channels=1, width=8, out_dim=16), proj_hidden_dim=16,
               proj_output_dim=8, **kw)  # fmt: skip


@pytest.mark.parametrize("cls", [CL, NCL, SupConCL])
def test_gathered_negatives_count_every_process(cls: type) -> None:
    model = _model(cls)
    check_batch_negatives(model, _data(1), world_size=2)  # 2 images in the gathered batch
    with pytest.raises(ConfigError, match=r"a batch of 1 \(1 per process x 2 processes\)"):
        check_batch_negatives(_model(cls, gather_distributed=False), _data(1), world_size=2)
    with pytest.raises(ConfigError, match="batch_size=1: "):
        check_batch_negatives(model, _data(1), world_size=1)
    check_batch_negatives(model, _data(2), world_size=1)


def test_global_scope_and_the_last_batch_per_process() -> None:
    model = _model()
    with pytest.raises(ConfigError, match=r"batch of 1 \(1 per process x 2 processes\)"):
        check_batch_negatives(_model(gather_distributed=False), _data(2, scope="global"), 2)
    # 1001 samples on 2 processes: 501 each, last batch of 1 per process, gathered: 2
    check_batch_negatives(model, _data(4, drop_last=False, samples=1001), world_size=2)
    with pytest.raises(ConfigError, match="last training batch of 1 image"):
        check_batch_negatives(model, _data(4, drop_last=False, samples=1001), world_size=1)
    check_batch_negatives(model, _data(4, drop_last=True, samples=1001), world_size=1)


def test_methods_without_negatives_are_left_alone() -> None:
    byol = BYOL(SmallCNN(in_channels=1, width=8, out_dim=16), proj_hidden_dim=16,
                proj_output_dim=8, pred_hidden_dim=16)  # fmt: skip
    check_batch_negatives(byol, _data(1), world_size=1)
