"""SEPIN@k: per-dimension informativeness of features under the InfoNCE bound.

SEPIN (Do & Tran, "Theory and Evaluation Metrics for Learning Disentangled
Representations", ICLR 2020) measures how much information about the input a single
dimension carries beyond all the others, ``I(x; z) - I(x; z₋ᵢ)``. The NCL paper (Wang
et al., "Non-negative Contrastive Learning", ICLR 2024, Appendix G.3) estimates the
mutual information with the InfoNCE lower bound ``I ≈ log(2B - 1) - L_NCE``, so

    SEPIN_i ≈ L_NCE(z₋ᵢ) - L_NCE(z),

where ``z₋ᵢ`` drops dimension ``i`` (and is re-normalised), positives are the two augmented
views of one image, the other in-batch features are negatives and the temperature is the
training one. SEPIN@k is the mean of the ``k`` largest ``SEPIN_i``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import Tensor

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.validation import check_int, check_positive
from ncl_lightning.losses.info_nce import info_nce
from ncl_lightning.metrics.functional.sparsity import l2_normalize_rows

DEFAULT_KS: tuple[int | None, ...] = (1, 10, 100, None)

# Elements of the ``[chunk, 2B, 2B]`` working tensor (8 MB in float32: 8 dims at B = 256); a
# cache-sized chunk was fastest on a 2-core CPU, larger ones are memory-bound.
_CHUNK_ELEMENTS = 1 << 21


def _check_views(z1: Tensor, z2: Tensor, temperature: float) -> None:
    if z1.ndim != 2 or z1.shape != z2.shape:
        raise ConfigError(
            f"expected two [B, d] views of equal shape, got {tuple(z1.shape)} "
            f"and {tuple(z2.shape)}",
            key="z2",
        )
    if z1.shape[0] < 1 or z1.shape[1] < 1:
        raise ConfigError(
            f"need B >= 1 pairs and d >= 1 dimensions, got {tuple(z1.shape)}", key="z1"
        )
    check_positive("temperature", temperature)


def _upcast(z1: Tensor, z2: Tensor) -> tuple[Tensor, Tensor]:
    """Detach; compute half precision and integer inputs in float32 (float64 stays)."""
    z1, z2 = z1.detach(), z2.detach()
    if not z1.is_floating_point() or z1.dtype in (torch.float16, torch.bfloat16):
        z1, z2 = z1.float(), z2.float()
    return z1, z2


def _exclusive_square_sums(z: Tensor) -> Tensor:
    """``n²[a, i] = Σ_{j ≠ i} z[a, j]²`` for every row ``a`` and dimension ``i``: ``[N, d]``.

    Computed as prefix + suffix sums of squares rather than ``Σ_j z² - z[:, i]²``: the terms
    are non-negative, so there is no cancellation and a row whose only non-zero entry is
    ``i`` gets exactly 0 (not a rounding residue like ``1 - 1.0000001²``).
    """
    sq = z * z
    zero = sq.new_zeros(sq.shape[0], 1)
    before = torch.cat([zero, sq[:, :-1].cumsum(dim=1)], dim=1)
    after = torch.cat([sq[:, 1:].flip(1).cumsum(dim=1).flip(1), zero], dim=1)
    return before + after


def sepin_per_dimension(
    z1: Tensor, z2: Tensor, temperature: float, chunk_size: int | None = None
) -> Tensor:
    """Per-dimension SEPIN, ``L_NCE(z₋ᵢ) - L_NCE(z)`` for every ``i``, vectorised over ``i``.

    ``L_NCE`` is the training InfoNCE ([`info_nce`][ncl_lightning.losses.info_nce.info_nce]
    with ``gather_distributed=False``): each of the ``2B`` features is a query, its positive
    is the other view of the same sample, the other ``2B - 2`` features are negatives, and
    the loss is the mean over queries.

    Method: dropping dimension ``i`` of ``z`` and re-normalising equals dropping it from
    ``ẑ = z / ||z||`` and re-normalising. With ``Z = [ẑ1; ẑ2]`` (``[2B, d]``) and
    ``M = Z Zᵀ``, the leave-``i``-out cosine is
    ``(M - Z[:, i] Z[:, i]ᵀ)[a, b] / (n_a n_b)`` with ``n_a² = Σ_{j≠i} Z[a, j]²``. Dimensions
    are processed in chunks (a ``[chunk, 2B, 2B]`` working tensor), each query's
    log-partition function is a ``logsumexp`` with the self-similarity masked out, and
    there is no Python loop over single dimensions.

    Zero rows: sparse non-negative features often have rows whose only non-zero entry is
    ``i``; without it they are the zero vector, which (as ``torch.nn.functional.normalize``
    does in the reference) has cosine 0 with everything. A row counts as zero when
    ``n_a² <= eps`` of the compute dtype (``1.2e-7`` in float32): below that the remainder
    is not resolved by ``M - Z[:, i] Z[:, i]ᵀ`` in that precision. ``n_a²`` itself is a sum
    of non-negative terms (exactly 0 for a single-entry row). Pass float64 features for
    rows whose mass is almost entirely in one dimension.

    Args:
        z1: First view's features ``[B, d]`` (any scale; half precision is computed in
            float32, float64 stays float64).
        z2: Second view's features ``[B, d]``, row ``b`` paired with row ``b`` of ``z1``.
        temperature: Training softmax temperature ``τ > 0``.
        chunk_size: Dimensions per chunk; by default ``max(1, 2²¹ // (2B)²)`` (an 8 MB
            float32 working tensor, 8 dimensions at ``B = 256``).

    Returns:
        ``[d]`` SEPIN estimates in nats (detached). Larger means the dimension carries more
        information not present in the other dimensions; can be slightly negative.
    """
    _check_views(z1, z2, temperature)
    if chunk_size is not None:
        check_int("chunk_size", chunk_size)
    z1, z2 = _upcast(z1, z2)
    base = info_nce(z1, z2, temperature, gather_distributed=False)

    z = l2_normalize_rows(torch.cat([z1, z2]))  # [2B, d]
    n2b, d = z.shape
    batch = n2b // 2
    gram = z @ z.T  # [2B, 2B]
    # Queries a and their positives p(a): the other view of the same sample.
    rows = torch.arange(n2b, device=z.device)
    pos = (rows + batch) % n2b
    gram_pos = gram[rows, pos]  # [2B]

    rest_sq = _exclusive_square_sums(z)  # [2B, d]
    eps = torch.finfo(z.dtype).eps
    # Inverse norms of the leave-one-out rows; 0 for rows that become the zero vector.
    inv = torch.where(rest_sq > eps, rest_sq.clamp_min(eps).rsqrt(), torch.zeros_like(rest_sq))

    chunk = min(d, chunk_size or max(1, _CHUNK_ELEMENTS // (n2b * n2b)))
    # |logit| <= 1/τ, so exp needs no max-shift unless 1/τ nears the dtype's exponent range
    # (τ < ~0.012 in float32 with 2B = 512); then fall back to a shifted logsumexp.
    info, max_logit = torch.finfo(z.dtype), 1.0 / temperature
    plain_exp = max_logit + math.log(n2b) < math.log(info.max) and max_logit < -math.log(info.tiny)
    # Dimension-major copies: strided broadcast operands are several times slower.
    z_t, inv_t = z.T.contiguous(), inv.T.contiguous()  # [d, 2B]
    # One reused working buffer: fresh multi-MB tensors per chunk cost page faults.
    work = z.new_empty(chunk, n2b, n2b)
    out = z.new_empty(d)
    for start in range(0, d, chunk):
        cols = slice(start, min(start + chunk, d))
        zi, inv_i = z_t[cols], inv_t[cols]  # [c, 2B]
        logits = work[: zi.shape[0]]
        # logits[k, a, b] = (M - z_i z_iᵀ)[a, b] · inv[a] inv[b] / τ, the leave-i-out cos / τ
        torch.addcmul(gram, zi.unsqueeze(2), zi.unsqueeze(1), value=-1, out=logits)
        logits.mul_((inv_i / temperature).unsqueeze(2)).mul_(inv_i.unsqueeze(1))
        if plain_exp:
            logits.exp_().diagonal(dim1=1, dim2=2).zero_()  # drop the self-similarity
            log_partition = logits.sum(dim=2).log_()  # [c, 2B]
        else:
            logits.diagonal(dim1=1, dim2=2).fill_(-math.inf)
            log_partition = torch.logsumexp(logits, dim=2)
        positive = (gram_pos - zi * zi[:, pos]) * inv_i * inv_i[:, pos] / temperature
        out[cols] = (log_partition - positive).mean(dim=1)
    return out - base.to(out.dtype)


def sepin_per_dimension_loop(z1: Tensor, z2: Tensor, temperature: float) -> Tensor:
    """Per-dimension SEPIN by brute force: one InfoNCE per dropped column.

    The definition of [`sepin_per_dimension`][] written as a loop over ``i``: drop column
    ``i`` of both views and evaluate [`info_nce`][ncl_lightning.losses.info_nce.info_nce]
    (which re-normalises). ``O(d)`` separate ``[2B, 2B]`` problems; the reference in tests
    and the baseline in ``python -m ncl_lightning.bench metrics``.

    Args:
        z1: First view's features ``[B, d]``.
        z2: Second view's features ``[B, d]``.
        temperature: Training softmax temperature ``τ > 0``.

    Returns:
        ``[d]`` SEPIN estimates in nats (detached).
    """
    _check_views(z1, z2, temperature)
    z1, z2 = _upcast(z1, z2)
    base = info_nce(z1, z2, temperature, gather_distributed=False)
    d = z1.shape[1]
    out = torch.empty(d, dtype=z1.dtype, device=z1.device)
    for i in range(d):
        keep = torch.cat([torch.arange(i), torch.arange(i + 1, d)]).to(z1.device)
        out[i] = info_nce(z1[:, keep], z2[:, keep], temperature, gather_distributed=False) - base
    return out


def check_ks(ks: Iterable[int | None]) -> tuple[int | None, ...]:
    """Validate SEPIN@k cut-offs: each ``k >= 1`` or ``None`` (all); returns them as a tuple."""
    ks = tuple(ks)
    if not ks:
        raise ConfigError("ks must name at least one k (an int >= 1, or None for all)", key="ks")
    for k in ks:
        if k is not None:
            check_int("ks", k)
    return ks


def sepin_at_k(per_dim: Tensor, ks: Iterable[int | None] = DEFAULT_KS) -> dict[str, Tensor]:
    """SEPIN@k: mean of the ``k`` largest per-dimension SEPIN values (NCL paper, Table 2).

    Args:
        per_dim: Per-dimension SEPIN ``[d]``, e.g. from [`sepin_per_dimension`][].
        ks: Cut-offs; ``None`` means all ``d`` dimensions. A ``k > d`` also uses all ``d``
            (so SEPIN@100 of a 64-dim code equals SEPIN@all).

    Returns:
        ``{"sepin@k": scalar}`` per ``k`` (``"sepin@all"`` for ``None``), in the order given.
    """
    ks = check_ks(ks)
    if per_dim.ndim != 1 or per_dim.numel() < 1:
        raise ConfigError(
            f"per_dim must have shape [d] with d >= 1, got {tuple(per_dim.shape)}", key="per_dim"
        )
    ordered = per_dim.sort(descending=True).values
    d = ordered.numel()
    return {
        f"sepin@{'all' if k is None else k}": ordered[: d if k is None else min(k, d)].mean()
        for k in ks
    }
