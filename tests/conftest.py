"""Shared fixtures: paths to real data and an offline, quiet environment for every test."""

from __future__ import annotations

import contextlib
import os
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

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")


@pytest.fixture
def cifar_subset() -> Path:
    """The real CIFAR-10 ImageFolder subset shipped beside the project (skips when absent)."""
    if not (CIFAR_SUBSET / "train").is_dir():
        pytest.skip(f"real CIFAR-10 subset not found at {CIFAR_SUBSET} (present in CI)")
    return CIFAR_SUBSET
