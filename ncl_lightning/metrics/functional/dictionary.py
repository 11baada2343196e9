"""Dictionary recovery of a linear encoder on sparse-coding data.

Reference: Pokle, Tian, Li, Risteski, "Contrasting the landscape of contrastive and
non-contrastive learning", AISTATS 2022: with inputs ``x = M z + ε``, an encoder
``f(x) = W x`` recovers the dictionary when every column ``M_j`` is (up to sign and
scale) one of the rows ``W_i``. The score of atom ``j`` is

    ``s_j = max_i |cos(W_i, M_j)|``,

and a run is summarised by the max, median and min of ``s`` over the ``d`` atoms
(1 = the atom is recovered exactly). Encoder rows with zero norm have cosine 0.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ncl_lightning.foundation.errors import ConfigError

_NORM_EPS = 1e-12


def check_dictionary(dictionary: Tensor) -> None:
    """``ConfigError`` unless ``dictionary`` is ``[p, d]`` with ``p, d >= 1``."""
    if dictionary.ndim != 2 or min(dictionary.shape) < 1:
        raise ConfigError(
            f"dictionary must have shape [p, d], got {tuple(dictionary.shape)}", key="dictionary"
        )


def check_weight_dictionary(weight: Tensor, dictionary: Tensor) -> None:
    """``ConfigError`` unless ``weight`` is ``[m, p]`` and ``dictionary`` is ``[p, d]``."""
    check_dictionary(dictionary)
    p = dictionary.shape[0]
    if weight.ndim != 2 or weight.shape[0] < 1 or weight.shape[1] != p:
        raise ConfigError(
            f"weight must have shape [m, {p}] (m >= 1), got {tuple(weight.shape)}", key="weight"
        )


def dictionary_cosines(weight: Tensor, dictionary: Tensor) -> Tensor:
    """``|cos(W_i, M_j)|`` for every encoder row ``i`` and atom ``j``, in float64.

    Args:
        weight: Encoder weight ``W`` ``[m, p]`` (rows are the features' filters).
        dictionary: Dictionary ``M`` ``[p, d]`` (columns are the atoms).

    Returns:
        ``[m, d]`` float64 in ``[0, 1]``.
    """
    check_weight_dictionary(weight, dictionary)
    w = weight.detach().double()
    m = dictionary.detach().to(device=w.device, dtype=torch.float64)
    w = w / w.norm(dim=1, keepdim=True).clamp_min(_NORM_EPS)
    m = m / m.norm(dim=0, keepdim=True).clamp_min(_NORM_EPS)
    return (w @ m).abs()


def dictionary_atom_scores(weight: Tensor, dictionary: Tensor) -> Tensor:
    """Per-atom recovery ``s_j = max_i |cos(W_i, M_j)|``.

    Args:
        weight: Encoder weight ``W`` ``[m, p]``.
        dictionary: Dictionary ``M`` ``[p, d]``.

    Returns:
        ``[d]`` float32 in ``[0, 1]``.
    """
    return dictionary_cosines(weight, dictionary).amax(dim=0).float()


def dictionary_recovery(weight: Tensor, dictionary: Tensor) -> dict[str, Tensor]:
    """Max, median and min over atoms of ``s_j = max_i |cos(W_i, M_j)|``; higher is better.

    The median is the usual one (mean of the two middle values for even ``d``).

    Args:
        weight: Encoder weight ``W`` ``[m, p]``.
        dictionary: Dictionary ``M`` ``[p, d]``.

    Returns:
        ``{"max": ..., "median": ..., "min": ...}``, scalar float32 tensors in ``[0, 1]``.
    """
    scores = dictionary_cosines(weight, dictionary).amax(dim=0)
    return {
        "max": scores.max().float(),
        "median": scores.quantile(0.5).float(),
        "min": scores.min().float(),
    }
