"""The extension example of docs/extending.md: it runs, it is correct, the page shows it."""

from __future__ import annotations

import math
import os
import re
import subprocess
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


# ------------------------------------------------------------------ the SLURM examples
SLURM = sorted((ROOT / "examples" / "slurm").glob("*.s*"))
# Variables the scripts set for the programs they start (not read by the script itself).
READ_BY_PROGRAMS = {"WANDB_MODE", "NCCL_DEBUG", "NCCL_SOCKET_IFNAME", "NCCL_IB_DISABLE"}
SET_BY_LAUNCHER = re.compile(r"SLURM_\w+")


def _code(path: Path) -> str:
    """The script without its comments (the `#SBATCH` lines are comments to bash)."""
    return "\n".join(line.split(" #")[0] for line in path.read_text().splitlines()
                     if not line.lstrip().startswith("#"))  # fmt: skip


def test_the_slurm_examples_are_bash_that_parses() -> None:
    assert {p.name for p in SLURM} == {"pretrain.sbatch", "seeds.sbatch", "torchrun_node.sh"}
    for path in SLURM:
        done = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        assert done.returncode == 0, f"{path.name}: {done.stderr}"


@pytest.mark.parametrize("path", SLURM, ids=lambda p: p.name)
def test_every_variable_a_slurm_example_sets_is_used_and_every_one_it_reads_is_said(
    path: Path,
) -> None:
    """No variable set for nothing (as NCL_DATA once was): each one the script sets is read
    by it or by the programs it starts, and each one it reads is set in it, by SLURM, or
    named in its header as an input (``CONFIG=... sbatch ...``)."""
    text, code = path.read_text(), _code(path)
    header = text.split("\nset -", 1)[0].split("\n#SBATCH", 1)[0]
    commented = {m for line in text.splitlines() if line.lstrip().startswith("#")
                 for m in re.findall(r"export (\w+)=", line)}  # fmt: skip
    assigned = set(re.findall(r"^\s*(?:export\s+)?(\w+)=", code, re.M))
    read = set(re.findall(r"\$\{?(\w+)", code)) - {"@"}
    for name in assigned:  # read on a line other than its own default (X=${X:-...})
        elsewhere = [line for line in code.splitlines()
                     if not re.match(rf"\s*(?:export\s+)?{name}=", line)]  # fmt: skip
        used = re.search(rf"\$\{{?{name}\b", "\n".join(elsewhere))
        assert used or name in READ_BY_PROGRAMS, f"{path.name}: {name} is set, never used"
    for name in commented:
        assert name in READ_BY_PROGRAMS, f"{path.name}: {name} in a comment, read by nothing"
    for name in read - assigned:
        said = re.search(rf"\b{name}\b", header) or SET_BY_LAUNCHER.fullmatch(name)
        assert said or name.isdigit(), f"{path.name}: reads ${name}, which nothing sets"


@pytest.mark.parametrize("path", [p for p in SLURM if p.suffix == ".sbatch"], ids=lambda p: p.name)
def test_the_sbatch_scripts_say_to_create_the_log_folder_and_keep_the_epoch_lines(
    path: Path,
) -> None:
    text = path.read_text()
    (output,) = re.findall(r"^#SBATCH --output=(\S+)", text, re.M)
    folder = output.rsplit("/", 1)[0]
    assert f"mkdir -p {folder}" in text  # SLURM does not create it; said before sbatch
    assert text.index(f"mkdir -p {folder}") < text.index("sbatch ")
    # a log file gets ncl-cli's one line per epoch (runtime.console); switching progress
    # off would silence those too
    assert "--trainer.enable_progress_bar false" not in _code(path)
    assert 'source "$VENV/bin/activate"' in _code(path)
    assert '${NCL_DATA:+--data.init_args.root "$NCL_DATA"}' in _code(path)


def test_ncl_data_reaches_the_run_as_its_data_root(tmp_path: Path) -> None:
    """The srun line's ``${NCL_DATA:+...}``: the root when set (a path with a space
    included), nothing when unset."""
    line = 'printf "%s\\n" ${NCL_DATA:+--data.init_args.root "$NCL_DATA"} "$@"'
    for value, expected in (("/shared/my data", ["--data.init_args.root", "/shared/my data"]),
                            (None, [])):  # fmt: skip
        env = {"PATH": os.environ["PATH"], **({"NCL_DATA": value} if value else {})}
        done = subprocess.run(["bash", "-c", line, "x", "--last"], env=env,
                              capture_output=True, text=True, check=True)  # fmt: skip
        assert done.stdout.splitlines() == [*expected, "--last"]
