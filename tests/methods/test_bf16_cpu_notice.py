"""A bf16 run on a CPU without bfloat16 units warns once at the start of the fit, naming
the option that fixes it (issue 47); none on a CPU with them, in float32 or on a GPU."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from ncl_lightning.methods import speed_switches
from ncl_lightning.methods.speed_switches import bf16_on_cpu_notice
from ncl_lightning.runtime.cli import cli_main
from tests.conftest import ROOT


def test_the_notice_names_the_fix_only_where_it_applies(monkeypatch: pytest.MonkeyPatch) -> None:
    cpu = torch.device("cpu")
    monkeypatch.setattr(speed_switches, "cpu_computes_bf16", lambda: False)
    notice = bf16_on_cpu_notice("bf16-mixed", cpu)
    assert notice is not None and "--trainer.precision 32-true" in notice
    assert bf16_on_cpu_notice("bf16-true", cpu) is not None
    assert bf16_on_cpu_notice("32-true", cpu) is None
    assert bf16_on_cpu_notice("bf16-mixed", torch.device("cuda", 0)) is None
    monkeypatch.setattr(speed_switches, "cpu_computes_bf16", lambda: True)
    assert bf16_on_cpu_notice("bf16-mixed", cpu) is None


@pytest.mark.slow
@pytest.mark.parametrize("has_units", [False, True])
def test_a_bf16_fit_on_such_a_cpu_warns_once(
    has_units: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(speed_switches, "cpu_computes_bf16", lambda: has_units)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cli_main([
            "fit", "--config", str(ROOT / "configs/demo/digits_ncl.yaml"),
            "--trainer.precision", "bf16-mixed", "--trainer.fast_dev_run", "1",
            "--trainer.enable_progress_bar", "false",
            "--trainer.default_root_dir", str(tmp_path),
        ])  # fmt: skip
    ours = [w for w in caught if "without bfloat16 units" in str(w.message)]
    assert len(ours) == (0 if has_units else 1), [str(w.message) for w in caught]
