"""Encoders for the sparse-coding ground-truth setting (Pokle et al., AISTATS 2022).

Pokle, Tian, Li, Risteski, "Contrasting the landscape of contrastive and non-contrastive
learning", AISTATS 2022, study a one-layer encoder ``f(x) = σ(W x)`` on inputs
``x = M z + ε`` (see ``ncl_lightning.data.sparse_coding``): the encoder recovers the
dictionary when the rows of ``W`` align with the columns of ``M``. ``σ`` is the symmetric
ReLU with a learned threshold ``b``,

    ``SReLU_b(u) = ReLU(u - b) - ReLU(-u - b)``,

which zeroes ``|u| <= b`` and shrinks the rest towards 0 (soft thresholding, the
proximal map of the l1 penalty), or a plain thresholded ReLU ``ReLU(u - b)``.
"""

from __future__ import annotations

import math
from typing import Literal, get_args

import torch
from torch import Tensor, nn

from ncl_lightning.foundation.validation import (
    check_at_least,
    check_choice,
    check_int,
    check_positive,
    check_shape,
)
from ncl_lightning.nn.backbones import backbone_spec
from ncl_lightning.nn.protocols import Backbone

Activation = Literal["srelu", "relu"]


class ThresholdActivation(nn.Module):
    """``SReLU_b`` (``"srelu"``) or ``ReLU(u - b)`` (``"relu"``) with a per-unit threshold.

    Args:
        width: Number of units (one threshold each).
        kind: ``"srelu"`` (symmetric, for ±1 latents) or ``"relu"``.
        bias_init: Initial threshold ``b`` of every unit.
        learn_bias: Train ``b`` (otherwise a fixed buffer).

    Shapes:
        ``[B, width] -> [B, width]``.
    """

    def __init__(
        self,
        width: int,
        kind: Activation = "srelu",
        bias_init: float = 0.0,
        learn_bias: bool = True,
    ) -> None:
        super().__init__()
        check_choice("kind", kind, get_args(Activation))
        self.kind = kind
        bias = torch.full((width,), float(bias_init))
        if learn_bias:
            self.bias = nn.Parameter(bias)
        else:
            self.register_buffer("bias", bias)

    def forward(self, u: Tensor) -> Tensor:
        if self.kind == "relu":
            return torch.relu(u - self.bias)
        return torch.relu(u - self.bias) - torch.relu(-u - self.bias)


class SparseCodingEncoder(nn.Module, Backbone):
    """``σ(BN(W x))``, optionally followed by a second ``σ(BN(V ·))`` layer.

    The first layer has no additive bias: the threshold of the activation plays that
    role (Pokle et al., 2022, Sec. 3). BatchNorm (``affine=False``) rescales each unit,
    which leaves the direction of every row of ``W``, hence dictionary recovery, unchanged.

    Args:
        in_dim: Input dimension ``p``.
        width: Number of neurons ``m`` (the paper uses ``m = 50`` for ``d = 10``).
        activation: ``"srelu"`` (``SReLU_b``) or ``"relu"`` (``ReLU(u - b)``).
        batch_norm: BatchNorm without affine parameters before each activation.
        bias_init: Initial threshold ``b`` (in units of the BN-normalised pre-activation
            when ``batch_norm``).
        learn_bias: Train the thresholds.
        init_std: Std of the Gaussian initialisation of ``W``; ``None`` keeps PyTorch's
            default. Pokle et al. use ``1 / sqrt(p d)``.
        second_layer: Add a second ``width x width`` layer with the same normalisation
            and activation.

    Attributes:
        out_dim: ``width``.
        spec: ``{"class_path", "init_args"}`` rebuilding this architecture.

    Shapes:
        ``x``: ``[B, in_dim]`` -> ``[B, width]``.
    """

    def __init__(
        self,
        in_dim: int = 50,
        width: int = 50,
        activation: Activation = "srelu",
        batch_norm: bool = True,
        bias_init: float = 0.5,
        learn_bias: bool = True,
        init_std: float | None = None,
        second_layer: bool = False,
    ) -> None:
        super().__init__()
        for name, value in (("in_dim", in_dim), ("width", width)):
            check_int(name, value)
        check_choice("activation", activation, get_args(Activation))
        if init_std is not None:
            check_positive("init_std", init_std)
        self.out_dim = width
        self.spec = backbone_spec(
            SparseCodingEncoder,
            in_dim=in_dim,
            width=width,
            activation=activation,
            batch_norm=batch_norm,
            bias_init=bias_init,
            learn_bias=learn_bias,
            init_std=init_std,
            second_layer=second_layer,
        )
        self.linear = nn.Linear(in_dim, width, bias=False)
        if init_std is not None:
            nn.init.normal_(self.linear.weight, std=init_std)
        self.norm = nn.BatchNorm1d(width, affine=False) if batch_norm else nn.Identity()
        self.act = ThresholdActivation(width, activation, bias_init, learn_bias)
        self.second: nn.Sequential | None = None
        if second_layer:
            self.second = nn.Sequential(
                nn.Linear(width, width, bias=False),
                nn.BatchNorm1d(width, affine=False) if batch_norm else nn.Identity(),
                ThresholdActivation(width, activation, bias_init, learn_bias),
            )

    @property
    def dictionary_weight(self) -> nn.Parameter:
        """First-layer weight ``W`` ``[m, p]``: its rows are compared with the atoms."""
        return self.linear.weight

    def forward(self, x: Tensor) -> Tensor:
        """Encode ``[B, in_dim]`` to ``[B, width]``."""
        h = self.act(self.norm(self.linear(x)))
        return h if self.second is None else self.second(h)


@torch.no_grad()
def warm_start_(
    weight: Tensor, dictionary: Tensor, c: float, generator: torch.Generator | None = None
) -> Tensor:
    """Initialise ``W`` at the dictionary plus noise (Pokle et al., 2022, Sec. 5.2.2).

    Row ``i`` becomes ``M[:, j_i]ᵀ + ξ_i`` with ``ξ_i ~ N(0, p^{-c} I)`` (std
    ``σ = 1 / p^{c/2}``; the paper's Figs. 4-6 use ``c = 1``, ``σ ≈ 0.141`` at ``p = 50``,
    Fig. 7 ``c = 2``): larger ``c`` starts closer to the ground truth. Every atom gets at
    least one row when ``m >= d``; the other rows take uniformly random atoms (the
    authors' ``gen_Winit`` draws all ``m`` atoms at random, with replacement).

    Args:
        weight: Encoder weight ``[m, p]``, overwritten in place.
        dictionary: ``M`` ``[p, d]``.
        c: Noise exponent (>= 0).
        generator: Source of randomness (CPU).

    Returns:
        The atom index ``j_i`` of every row ``[m]``.
    """
    check_at_least("c", c, 0)
    m, p = weight.shape
    check_shape("dictionary", dictionary, (p, "d"))
    d = dictionary.shape[1]
    atoms = torch.arange(d)[:m]
    if m > d:
        atoms = torch.cat([atoms, torch.randint(0, d, (m - d,), generator=generator)])
    atoms = atoms[torch.randperm(m, generator=generator)]
    noise = torch.randn(m, p, generator=generator) / math.sqrt(p**c)
    init = dictionary.detach().cpu().float().T[atoms] + noise
    weight.copy_(init.to(device=weight.device, dtype=weight.dtype))
    return atoms


@torch.no_grad()
def normalize_weight_(weight: Tensor, mode: Literal["rows", "columns"]) -> None:
    """Scale the rows (``"rows"``) or columns (``"columns"``) of ``weight`` to unit norm.

    Zero rows/columns are left at zero.
    """
    check_choice("mode", mode, ("rows", "columns"))
    dim = 1 if mode == "rows" else 0
    weight.div_(weight.norm(dim=dim, keepdim=True).clamp_min(1e-12))
