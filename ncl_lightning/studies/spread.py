"""Mean ± std over seeds, and when two rows differ by more than their spread.

The studies report every value as ``mean ± std`` over seeds (the sample standard
deviation, ``n - 1``; 0 for one seed) and list the pairs of rows whose ``mean ± std``
intervals do not overlap, ``|mean_a - mean_b| > std_a + std_b``
([`seeds`][ncl_lightning.studies.seeds], [`chain_seeds`][ncl_lightning.studies.chain_seeds],
[`landscape`][ncl_lightning.studies.landscape]).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return statistics.fmean(values), std


def beyond_spread(a: Sequence[float], b: Sequence[float], shown: Callable[[float], str]) -> bool:
    """Whether the ``mean ± std`` intervals of ``a`` and ``b`` are apart (each with at least
    two values) and their means differ as ``shown`` (float noise in a 0.0 is no
    difference)."""
    if len(a) < 2 or len(b) < 2:
        return False
    (ma, sa), (mb, sb) = mean_std(a), mean_std(b)
    return abs(ma - mb) > sa + sb and shown(ma) != shown(mb)
