"""Shared fixtures: paths to real data and an offline, quiet environment for every test."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CIFAR_SUBSET = (ROOT / ".." / "shared" / "data" / "cifar10-real-subset").resolve()

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")


@pytest.fixture
def cifar_subset() -> Path:
    """The real CIFAR-10 ImageFolder subset shipped beside the project (skips when absent)."""
    if not (CIFAR_SUBSET / "train").is_dir():
        pytest.skip(f"real CIFAR-10 subset not found at {CIFAR_SUBSET} (present in CI)")
    return CIFAR_SUBSET
