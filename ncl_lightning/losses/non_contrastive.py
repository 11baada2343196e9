"""Non-contrastive objectives: negative cosine with a stop-gradient target.

SimSiam (Chen & He, CVPR 2021) and BYOL (Grill et al., NeurIPS 2020) predict one view's
target features from the other view with ``D(p, z) = -cos(p, sg(z))``; the
stop-gradient ``sg`` (``detach``) is what keeps the Siamese network from collapsing.
The symmetrised loss ``½ D(p₁, z₂) + ½ D(p₂, z₁)`` lies in ``[-1, 1]`` (-1: perfect).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from ncl_lightning.foundation.validation import check_shape


def negative_cosine(p: Tensor, z: Tensor) -> Tensor:
    """``-mean_i cos(p_i, sg(z_i))``: no gradient reaches ``z``.

    Args:
        p: Predictions ``[B, d]``.
        z: Targets ``[B, d]`` (detached here).

    Returns:
        Scalar in ``[-1, 1]``.
    """
    check_shape("p", p, ("B", "d"))
    check_shape("z", z, tuple(p.shape))
    return -F.cosine_similarity(p, z.detach(), dim=1).mean()


def symmetric_negative_cosine(p1: Tensor, p2: Tensor, z1: Tensor, z2: Tensor) -> Tensor:
    """SimSiam/BYOL loss ``½ D(p₁, z₂) + ½ D(p₂, z₁)`` over the two views.

    Args:
        p1: Predictions from view 1 ``[B, d]``.
        p2: Predictions from view 2 ``[B, d]``.
        z1: Targets of view 1 ``[B, d]``.
        z2: Targets of view 2 ``[B, d]``.

    Returns:
        Scalar in ``[-1, 1]``.
    """
    return 0.5 * (negative_cosine(p1, z2) + negative_cosine(p2, z1))
