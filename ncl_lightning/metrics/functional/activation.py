"""Expected activation (EA) of feature dimensions and EA-based feature selection.

Reference: Wang et al., "Non-negative Contrastive Learning" (NCL), ICLR 2024, Sec. 6.1 and
Table 1: ``EA_i = mean_x ẑ_i(x)`` on training features ranks the dimensions; keeping the
top-k (e.g. 256 of 512) preserves retrieval/linear accuracy for NCL but not for CL.
"""

from __future__ import annotations

from torch import Tensor

from ncl_lightning.foundation.validation import check_int, check_range, check_shape
from ncl_lightning.metrics.functional.sparsity import _check_features, l2_normalize_rows


def expected_activation(z: Tensor) -> Tensor:
    """Expected activation ``EA_i = mean_x ẑ_i(x)`` of each dimension.

    Args:
        z: Features ``[N, d]`` (rows are L2-normalised first).

    Returns:
        ``[d]`` float tensor (float32 or wider); NaN for ``N = 0``.
    """
    _check_features(z, 0.0)
    return l2_normalize_rows(z).mean(dim=0)


def select_by_expected_activation(ea: Tensor, k: int) -> Tensor:
    """Indices of the ``k`` dimensions with the largest expected activation.

    Args:
        ea: Expected activations ``[d]``.
        k: Number of dimensions to keep, ``1 <= k <= d``.

    Returns:
        int64 ``[k]`` indices, by decreasing EA.
    """
    check_shape("ea", ea, ("d",))
    check_int("k", k)
    check_range("k", k, 1, ea.shape[0])
    return ea.topk(k).indices
