"""Shared fixtures: paths to real data and an offline, quiet environment for every test."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CIFAR_SUBSET = (ROOT / ".." / "shared" / "data" / "cifar10-real-subset").resolve()

# The configs/{subset,eval}/*subset* files read `data/cifar10-real-subset` relative to the
# checkout, as a user's configs read their data; the tests put the team's copy there.
SUBSET_IN_CHECKOUT = ROOT / "data" / "cifar10-real-subset"


def _link_subset() -> None:
    if (CIFAR_SUBSET / "train").is_dir() and not SUBSET_IN_CHECKOUT.exists():
        SUBSET_IN_CHECKOUT.parent.mkdir(exist_ok=True)
        with contextlib.suppress(FileExistsError):  # another test process made it first
            SUBSET_IN_CHECKOUT.symlink_to(CIFAR_SUBSET, target_is_directory=True)


_link_subset()

# pytest-xdist workers share the cores: one BLAS/OpenMP pool per worker of cores / workers
# threads (torch's default, one thread per core in every worker, oversubscribes them); set
# before torch is imported, and inherited by the fits the tests start as subprocesses.
if workers := os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // int(workers))))
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")

# Tests that share a session fixture built once (the demo's runs, the docs site) run on one
# pytest-xdist worker (`make test` runs `-n 2 --dist loadgroup`), so it is built once.
_GROUPS = {"tests/atlas/": "demo", "tests/test_demo.py": "demo", "tests/test_docs.py": "site"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.fspath)).resolve().relative_to(ROOT).as_posix()
        group = next((g for prefix, g in _GROUPS.items() if path.startswith(prefix)), None)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture
def cifar_subset() -> Path:
    """The real CIFAR-10 ImageFolder subset shipped beside the project (skips when absent)."""
    if not (CIFAR_SUBSET / "train").is_dir():
        pytest.skip(f"real CIFAR-10 subset not found at {CIFAR_SUBSET} (present in CI)")
    return CIFAR_SUBSET


class DemoRun:
    """What one ``make demo``-like run left: its folder, report and printed lines."""

    def __init__(self, out: Path, report: str, stdout: str, stderr: str) -> None:
        self.out, self.report, self.stdout, self.stderr = out, report, stdout, stderr


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """The demo (CL, NCL and BayesNCL on digits) for one epoch, shared by the demo and atlas
    tests: runs, table, pictures, curves and the feature atlas of the three checkpoints."""
    import io

    from ncl_lightning.demo import main

    out = tmp_path_factory.mktemp("demo")
    extra = ["--trainer.max_epochs", "1", "--trainer.check_val_every_n_epoch", "1",
             "--trainer.enable_progress_bar", "false"]  # fmt: skip
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        report = main(["--out", str(out), *extra])
    return DemoRun(out, report, stdout.getvalue(), stderr.getvalue())


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The documentation site, built once per session with ``mkdocs build --strict`` (the
    docs tests and the docs pages' browser test share it)."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    warnings = [line for line in done.stderr.splitlines() if "WARNING" in line or "ERROR" in line]
    assert done.returncode == 0, "mkdocs build --strict failed:\n" + "\n".join(warnings[:30])
    return out


@pytest.fixture(autouse=True)
def _no_wandb_run_left_open() -> Iterator[None]:
    """One process is one run in real use; a W&B run a test left open is finished after it
    so that the next test on the same pytest-xdist worker starts its own."""
    yield
    wandb = sys.modules.get("wandb")
    if wandb is not None and getattr(wandb, "run", None) is not None:
        wandb.finish()


def subset_copy(root: Path, train: int, val: int) -> Path:
    """The first ``train`` training and ``val`` validation images of every class of the real
    CIFAR-10 subset copied under ``root`` (an ImageFolder tree): the same real images,
    decoded in a fraction of the whole subset's time; skips when the subset is absent."""
    if not (CIFAR_SUBSET / "train").is_dir():
        pytest.skip(f"real CIFAR-10 subset not found at {CIFAR_SUBSET} (present in CI)")
    for split, n in (("train", train), ("val", val)):
        for folder in sorted((CIFAR_SUBSET / split).iterdir()):
            (root / split / folder.name).mkdir(parents=True)
            for image in sorted(folder.iterdir())[:n]:
                shutil.copy(image, root / split / folder.name / image.name)
    return root
