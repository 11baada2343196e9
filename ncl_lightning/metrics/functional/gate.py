"""Statistics of BayesNCL's gate masks (ICML 2026)."""

from __future__ import annotations

from torch import Tensor

from ncl_lightning.foundation.validation import check_shape


def open_frequency(mask: Tensor) -> Tensor:
    """Per-dimension open frequency ``mean_x m_i(x)`` of a 0/1 mask ``[N, d]`` -> ``[d]``."""
    check_shape("mask", mask, ("N", "d"))
    return mask.float().mean(dim=0)


def open_frequency_summary(freq: Tensor) -> dict[str, Tensor]:
    """Scalars of a ``[d]`` open-frequency vector: mean (the open rate), min, median, max,
    and the number of dimensions never open."""
    return {
        "open_rate": freq.mean(),
        "open_freq_min": freq.min(),
        "open_freq_median": freq.median(),
        "open_freq_max": freq.max(),
        "never_open_dims": (freq == 0).sum().float(),
    }
