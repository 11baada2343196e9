"""The atlas of the demo's checkpoints (CL, NCL, BayesNCL after one epoch on digits)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import DemoRun


@pytest.fixture(scope="session")
def demo_atlas(demo_run: DemoRun) -> Path:
    """The folder of the atlas ``make demo`` writes (``index.html``, ``img/``)."""
    return demo_run.out / "atlas"
