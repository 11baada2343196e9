"""The bookkeeping every two-view contrastive loss needs, in one public place.

A batch of ``n`` images per rank gives two views ``z1, z2`` of shape ``[n, d]``. On each
rank the loss compares its ``2n`` local *queries* with the ``2N`` *keys* of the global
batch (``N = n * world_size``), gathered from every rank with gradient so that a run on
``W`` ranks equals one process on the concatenated batch (``docs/extending.md``).

Layout (the same on every rank, ``r`` this rank's index)::

    queries [2n, d] = [ z1 of rank r          ; z2 of rank r          ]
    keys    [2N, d] = [ z1 of ranks 0..W-1    ; z2 of ranks 0..W-1    ]

Query ``i < n`` is view 1 of global sample ``offset + i`` (``offset = r * n``); query
``n + i`` is its view 2. Its own entry among the keys is [`ViewPairs.self_index`][]
(``offset + i`` or ``N + offset + i``) and the other view of the same image, its positive,
is [`ViewPairs.positive_index`][]. A new loss builds [`view_pairs`][] once and reads
the logits, masks and labels from it::

    pairs = view_pairs(normalize_rows(z1), normalize_rows(z2), gather_distributed)
    logits = pairs.similarities() / t                         # [2n, 2N]
    logits = logits.masked_fill(pairs.self_mask(), float("-inf"))
    loss = F.cross_entropy(logits, pairs.positive_index)     # InfoNCE
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from ncl_lightning.foundation.validation import check_shape
from ncl_lightning.nn.gather import gather_no_grad, gather_with_grad, rank


# Why not ``F.normalize``: a zero row (non-negative features reach it in normal training,
# all entries gated off or negative) gets the gradient ``(∂L/∂ẑ) / eps``, ~1e11 times the
# usual size; one such row sent ``5e10`` into BatchNorm parameters (which LARS does not
# adapt), and they reached ``1e9``-``1e28`` in two steps with a finite loss.
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


def pair_indices(n: int, total: int, offset: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """Indices into the ``[2N]`` keys of each local query's own entry and of its positive.

    Args:
        n: Local images per rank (queries ``[2n]``).
        total: Images of the global batch ``N`` (keys ``[2N]``).
        offset: Global index of this rank's first image (``rank * n``).
        device: Device of the returned indices.

    Returns:
        ``(self_index, positive_index)``, each ``[2n]`` (``int64``).
    """
    idx = torch.arange(n, device=device) + offset
    return torch.cat([idx, idx + total]), torch.cat([idx + total, idx])


class ViewPairs(NamedTuple):
    """Queries, keys and indices of one rank's two-view contrastive loss (module docstring)."""

    queries: Tensor
    """Local features ``[2n, d]``: view 1 of this rank's images, then view 2."""
    keys: Tensor
    """Global features ``[2N, d]``: view 1 of every rank (rank order), then view 2."""
    offset: int
    """Global index of this rank's first image (``rank * n``; 0 without gathering)."""
    self_index: Tensor
    """``[2n]``: the column of each query's own feature among the keys."""
    positive_index: Tensor
    """``[2n]``: the column of the other view of the query's image."""
    gathered: bool
    """Whether the keys were gathered from every rank (labels then are too)."""

    @property
    def n(self) -> int:
        """Local images ``n`` (half the queries)."""
        return self.queries.shape[0] // 2

    @property
    def total(self) -> int:
        """Images of the global batch ``N`` (half the keys)."""
        return self.keys.shape[0] // 2

    def similarities(self) -> Tensor:
        """Dot products ``queries @ keysᵀ`` ``[2n, 2N]`` (cosines for unit rows)."""
        return self.queries @ self.keys.T

    def self_mask(self) -> Tensor:
        """``[2n, 2N]`` bool: True at each query's own column (never a candidate)."""
        return self._one_per_row(self.self_index)

    def positive_mask(self) -> Tensor:
        """``[2n, 2N]`` bool: True at each query's positive (the other view)."""
        return self._one_per_row(self.positive_index)

    def _one_per_row(self, columns: Tensor) -> Tensor:
        # A comparison, not ``mask[rows, columns] = True``: assigning a Python number copies
        # it from pageable host memory to the device, a sync on a GPU.
        keys = torch.arange(2 * self.total, device=columns.device)
        return columns[:, None] == keys[None, :]

    def same_label(self, labels: Tensor) -> Tensor:
        """``[2n, 2N]`` bool: True where query and key images share a label (self included).

        Args:
            labels: This rank's labels ``[n]``, shared by both views; gathered from every
                rank (without gradient) when the keys were.
        """
        check_shape("labels", labels, (self.n,))
        key_labels = gather_no_grad(labels) if self.gathered else labels
        return labels.repeat(2)[:, None] == key_labels.repeat(2)[None, :]


def view_pairs(z1: Tensor, z2: Tensor, gather_distributed: bool = True) -> ViewPairs:
    """The [`ViewPairs`][] of two views: local queries, global keys and their indices.

    Features are used as given (normalise them first if the loss needs unit rows).

    Args:
        z1: First view's features ``[n, d]``.
        z2: Second view's features ``[n, d]``.
        gather_distributed: Take the keys of every rank (differentiably) under DDP; without
            a process group, or when False, the keys are the local views.

    Returns:
        The layout of the module docstring: ``queries [2n, d]``, ``keys [2N, d]``, the
        rank offset and the self / positive column of each query.

    Raises:
        ConfigError: The views are not two ``[n, d]`` tensors of equal shape.
    """
    if z1.dim() != 2 or z2.shape != z1.shape:  # read off the tensors: no call per step
        check_shape("z1", z1, ("n", "d"))
        check_shape("z2", z2, tuple(z1.shape))
    if gather_distributed:
        k1, k2, offset = gather_with_grad(z1), gather_with_grad(z2), rank() * z1.shape[0]
    else:
        k1, k2, offset = z1, z2, 0
    self_index, positive_index = pair_indices(z1.shape[0], k1.shape[0], offset, z1.device)
    return ViewPairs(
        queries=torch.cat([z1, z2]),
        keys=torch.cat([k1, k2]),
        offset=offset,
        self_index=self_index,
        positive_index=positive_index,
        gathered=gather_distributed,
    )
