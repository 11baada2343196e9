"""Sparse latents ``z ∈ {-1, 0, 1}^d`` (or ``{0, 1}^d``) of the sparse-coding model.

Two laws of the support, both used by [`ncl_lightning.data.SparseCodingModel`][]:
``"bernoulli"`` ([`bernoulli_latents`][]) and ``"fixed_count"``, the generator of Pokle et
al.'s code (``ashwinipokle/contrastive_landscape``,
``data_model/gen_sparse_coding_data.py``, ``gen_z``): [`fixed_count_latents`][] with
[`paper_nonzero_count`][] non-zeros.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor

from ncl_lightning.foundation.validation import check_int, check_range

Support = Literal["bernoulli", "fixed_count"]


def paper_nonzero_count(d: int, nonzero_prob: float) -> int:
    """Non-zeros per sample of Pokle et al.'s generator: ``max(⌈dβ⌉, ⌈dβ/2⌉ + 1)``.

    ``dβ`` is rounded to 9 decimals first, so a float such as ``10 × 0.3`` counts as 3.
    ``d = 10``: 2 at ``β = 0.1`` and ``0.2``, 3 at ``β = 0.3``.
    """
    check_int("d", d)
    check_range("nonzero_prob", nonzero_prob, 0.0, 1.0, "(]")
    expected = round(d * nonzero_prob, 9)
    return max(math.ceil(expected), math.ceil(expected / 2) + 1)


def bernoulli_latents(
    n: int, d: int, beta: float, symmetric: bool, generator: torch.Generator | None = None
) -> Tensor:
    """``[n, d]`` latents, entries non-zero i.i.d. w.p. ``beta`` given at least one non-zero.

    Exact, without a rejection loop: the index of the first non-zero entry follows its
    truncated geometric law ``P(k) ∝ (1 - β)^k β`` (``k < d``), the later entries are
    independent. Non-zero entries are ``±1`` with equal probability (``symmetric``) or 1.
    """
    first_probs = (1.0 - beta) ** torch.arange(d, dtype=torch.float64)
    first = torch.multinomial(first_probs, n, replacement=True, generator=generator)
    later = torch.rand(n, d, generator=generator) < beta
    index = torch.arange(d)
    z = (((index > first[:, None]) & later) | (index == first[:, None])).float()
    if symmetric:
        z = z * (torch.randint(0, 2, (n, d), generator=generator).float() * 2.0 - 1.0)
    return z


def fixed_count_latents(
    n: int, d: int, count: int, symmetric: bool, generator: torch.Generator | None = None
) -> Tensor:
    """``[n, d]`` latents with exactly ``count`` non-zero entries per row.

    Each row is a uniformly random permutation of a fixed vector: ``⌈count/2⌉`` entries
    ``-1`` and ``⌊count/2⌋`` entries ``+1`` (``symmetric``, Pokle et al.'s ``gen_z``) or
    ``count`` ones, and ``d - count`` zeros.
    """
    check_range("nonzero_count", count, 1, d)
    positions = torch.rand(n, d, generator=generator).argsort(dim=1)  # uniform permutations
    values = torch.zeros(d)
    values[:count] = 1.0
    if symmetric:
        values[: math.ceil(count / 2)] = -1.0
    z = torch.empty(n, d)
    z.scatter_(1, positions, values.expand(n, d))
    return z
