"""The extension example of docs/extending.md: it runs, it is correct, the page shows it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from examples.align_uniform import AlignUniformNCL, SquaredReLU, align_uniform
from ncl_lightning.runtime.cli import cli_main
from tests.conftest import ROOT


def reference_align_uniform(z1: torch.Tensor, z2: torch.Tensor, t: float, weight: float) -> float:
    a = [v / v.norm() for v in z1.double()]
    b = [v / v.norm() for v in z2.double()]
    align = sum(float((x - y).pow(2).sum()) for x, y in zip(a, b, strict=True)) / len(a)
    z = a + b
    pairs = [(i, j) for i in range(len(z)) for j in range(i + 1, len(z))]
    kernel = sum(math.exp(-t * float((z[i] - z[j]).pow(2).sum())) for i, j in pairs) / len(pairs)
    return align + weight * math.log(kernel)


@pytest.mark.parametrize(("n", "weight"), [(3, 1.0), (6, 0.5)])
def test_align_uniform_matches_reference(n: int, weight: float) -> None:
    g = torch.Generator().manual_seed(n)
    z1, z2 = torch.randn(n, 5, generator=g), torch.randn(n, 5, generator=g)
    got = align_uniform(z1, z2, t=2.0, weight=weight)
    assert got.item() == pytest.approx(reference_align_uniform(z1, z2, 2.0, weight), rel=1e-5)


@pytest.mark.slow
def test_example_runs_through_the_cli_as_documented(tmp_path: Path) -> None:
    args = [
        "fit",
        "--config", str(ROOT / "configs" / "demo" / "digits_ncl.yaml"),
        "--model", "examples.align_uniform.AlignUniformNCL",
        "--model.init_args.nonneg", "squared_relu",
        "--trainer.fast_dev_run", "2",
        "--trainer.enable_progress_bar", "false",
        "--trainer.default_root_dir", str(tmp_path),
    ]  # fmt: skip
    cli = cli_main(args)
    model = cli.model
    assert isinstance(model, AlignUniformNCL) and isinstance(model.nonneg, SquaredReLU)
    x = next(iter(cli.datamodule.val_dataloader()))[0]
    assert (model.eval().encode(x).z >= 0).all()
    assert torch.isfinite(cli.trainer.callback_metrics["train/objective"])


def test_docs_page_includes_the_example_file() -> None:
    """The page pulls the file in at build time (pymdownx.snippets), so it shows the code as it
    is; tests/test_docs.py checks the built page holds the class."""
    page = (ROOT / "docs" / "extending.md").read_text()
    assert '--8<-- "examples/align_uniform.py"' in page, "docs/extending.md no longer includes it"
    assert len((ROOT / "examples" / "align_uniform.py").read_text().splitlines()) < 100
