"""Mean ± std over seeds, and when two rows differ by more than their spread.

The studies report every value as ``mean ± std`` over seeds (the sample standard
deviation, ``n - 1``; 0 for one seed) and list the pairs of rows whose ``mean ± std``
intervals do not overlap, ``|mean_a - mean_b| > std_a + std_b``. A metric undefined on a
seed (NaN: semantic consistency with no active dimension) makes the row's value NaN.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value); NaN and NaN when a value
    is NaN."""
    if any(math.isnan(v) for v in values):
        return math.nan, math.nan
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return statistics.fmean(values), std


def beyond_spread(
    a: str, va: Sequence[float], b: str, vb: Sequence[float], shown: Callable[[float], str]
) -> str | None:
    """``"<higher> mean ± std > <lower> mean ± std"`` (values as ``shown``) when the
    ``mean ± std`` intervals of ``va`` and ``vb`` (each with at least two values) are apart
    and their means differ as ``shown`` (float noise in a 0.0 is no difference); else
    ``None``."""
    if len(va) < 2 or len(vb) < 2:
        return None
    (ma, sa), (mb, sb) = mean_std(va), mean_std(vb)
    if math.isnan(ma) or math.isnan(mb):
        return None
    if abs(ma - mb) <= sa + sb or shown(ma) == shown(mb):
        return None
    hi, lo = ((a, ma, sa), (b, mb, sb)) if ma > mb else ((b, mb, sb), (a, ma, sa))
    return " > ".join(f"{name} {shown(m)} ± {shown(s)}" for name, m, s in (hi, lo))
