"""Shared test data and the slow, obvious row normalisation used by the metric references."""

from __future__ import annotations

import math

import torch

EPS = 1e-5


def normalized_rows(z: torch.Tensor) -> list[list[float]]:
    """``ẑ = z / ||z||₂`` per row as python floats (a zero row stays zero)."""
    rows = []
    for row in z.double().tolist():
        norm = math.sqrt(sum(v * v for v in row))
        rows.append([v / norm if norm > 0 else 0.0 for v in row])
    return rows


def sparse_features(n: int = 48, d: int = 10, num_classes: int = 4, seed: int = 0):
    """Sparse non-negative features with exact zeros, a dead dim and an all-zero sample."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, num_classes, (n,), generator=g)
    z = torch.relu(torch.randn(n, d, generator=g) - 0.3)
    z[:, 2] = 0.0  # dead dimension
    z[:, 4] *= 1e-9  # below eps after normalisation -> dead too
    z[5] = 0.0  # all-zero sample
    # Make dimension 0 prefer class 0, so consistency is not uniform across dims.
    z[labels == 0, 0] += 1.0
    return z, labels


def dense_features(n: int = 48, d: int = 10, num_classes: int = 4, seed: int = 1):
    """Signed dense (CL-like) features."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g), torch.randint(0, num_classes, (n,), generator=g)


def one_hot_features(n: int = 40, num_classes: int = 4, extra_dead: int = 2, seed: int = 2):
    """Each dim fires (with a random magnitude) on one class only; plus dead dims."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % num_classes
    z = torch.zeros(n, num_classes + extra_dead)
    z[torch.arange(n), labels] = torch.rand(n, generator=g) + 0.5
    return z, labels


def batches(z: torch.Tensor, labels: torch.Tensor, sizes: list[int]):
    """Split ``(z, labels)`` into consecutive batches of the given sizes."""
    start = 0
    for size in sizes:
        yield z[start : start + size], labels[start : start + size]
        start += size
    assert start == z.shape[0]
