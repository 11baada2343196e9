"""The atlas of the demo's checkpoints (CL, NCL, BayesNCL after one epoch on digits).

``NCL_DEMO_ATLAS=runs/demo/atlas`` runs the atlas tests on the atlas a full ``make demo``
wrote instead (the docs' screenshots: ``NCL_ATLAS_SCREENSHOTS=docs/images/atlas``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def demo_atlas(request: pytest.FixtureRequest) -> Path:
    """The folder of the atlas ``make demo`` writes (``index.html``, ``img/``)."""
    given = os.environ.get("NCL_DEMO_ATLAS")
    if given:
        return Path(given).resolve()
    return request.getfixturevalue("demo_run").out / "atlas"
