"""L2 normalisation of feature rows for the contrastive losses, safe at the zero vector.

``F.normalize`` divides by ``max(‖z‖, eps)``. For a row that is exactly zero (or below
``eps``) that makes its gradient ``(∂L/∂ẑ) / eps``: with ``eps = 1e-12`` about ``1e11``
times the usual size. Non-negative features reach the zero vector in normal training: a
ReLU'd projector output whose positive entries are all gated off (BayesNCL), or all of whose
entries are negative (NCL). One such row in a batch sent gradients of ``5e10`` into
BatchNorm weights and biases (which LARS does not adapt), so they reached ``1e9``-``1e28``
in two steps with a finite loss.
"""

from __future__ import annotations

import torch
from torch import Tensor


def normalize_rows(z: Tensor, eps: float = 1e-12) -> Tensor:
    """``z / max(‖z‖, eps)`` row-wise, with no gradient through rows of norm ``<= eps``.

    The forward pass is exactly ``F.normalize(z, dim=1, eps=eps)``, and so is the gradient
    of every row with ``‖z‖ > eps``. A row at (or below) ``eps`` has no direction to learn
    from: it gets a zero gradient instead of ``1 / eps`` times the upstream one.

    Args:
        z: Features ``[n, d]``.
        eps: Norm below which a row counts as the zero vector.

    Returns:
        ``[n, d]``: unit rows, and the rows at or below ``eps`` divided by ``eps``.
    """
    norm = torch.linalg.vector_norm(z, dim=1, keepdim=True)
    unit = z / norm.clamp_min(eps)
    return torch.where(norm > eps, unit, unit.detach())
