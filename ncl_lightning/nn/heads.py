"""Projector heads."""

from __future__ import annotations

from torch import Tensor, nn

from ncl_lightning.foundation.validation import check_int


class MLP(nn.Module):
    """``num_layers`` linear layers, ReLU (after an optional BatchNorm) between them.

    The projector of the NCL and BayesNCL releases (``solo/methods/simclr.py``) is
    ``MLP(512, 2048, 256, batch_norm=False)``: Linear–ReLU–Linear, what CL, NCL and
    BayesNCL build by default (``proj_batch_norm``). SimCLR's (Chen et al., 2020) and
    SimSiam's projectors have BatchNorm, the default here.

    Args:
        in_dim: Input width (the backbone's ``out_dim``).
        hidden_dim: Width of every hidden layer.
        out_dim: Output width.
        num_layers: Number of linear layers (>= 1; 1 is a linear projector).
        batch_norm: BatchNorm after each hidden linear layer.
        output_batch_norm: BatchNorm (affine) after the output layer too: the projector of
            the SCL release (HaoChen et al., 2021; ``cifar_resnet_1_mlp_norelu.py``,
            Linear–BN–ReLU–Linear–BN).

    The methods check their own arguments first (``proj_hidden_dim``, ``gate_hidden_dim``,
    ...), so the message a config sees names its key; these checks guard direct use.
    """

    def __init__(
        self,
        in_dim: int,
        hidden_dim: int,
        out_dim: int,
        num_layers: int = 2,
        batch_norm: bool = True,
        output_batch_norm: bool = False,
    ) -> None:
        super().__init__()
        check_int("num_layers", num_layers)
        widths = [("in_dim", in_dim), ("out_dim", out_dim)]
        if num_layers > 1:  # a single linear layer has no hidden width
            widths.append(("hidden_dim", hidden_dim))
        for name, value in widths:
            check_int(name, value)
        layers: list[nn.Module] = []
        width = in_dim
        for _ in range(num_layers - 1):
            layers.append(nn.Linear(width, hidden_dim, bias=not batch_norm))
            if batch_norm:
                layers.append(nn.BatchNorm1d(hidden_dim))
            layers.append(nn.ReLU(inplace=True))
            width = hidden_dim
        layers.append(nn.Linear(width, out_dim, bias=not output_batch_norm))
        if output_batch_norm:
            layers.append(nn.BatchNorm1d(out_dim))
        self.net = nn.Sequential(*layers)
        self.out_dim = out_dim

    def forward(self, x: Tensor) -> Tensor:
        """``[B, in_dim] -> [B, out_dim]``."""
        return self.net(x)


class LinearClassifier(nn.Linear):
    """Linear classifier whose weights can be constrained to be non-negative.

    With ``nonneg_weights`` the forward pass uses ``ReLU(W)`` (the stored ``W`` is free):
    the classifier of Non-negative Cross Entropy (NCE; Wang et al., ICLR 2024, Sec. 6),
    where every class is a non-negative combination of non-negative features.

    Args:
        in_dim: Feature width ``d``.
        num_classes: Number of classes ``C``.
        nonneg_weights: Use ``ReLU(W)`` in the forward pass.

    Shapes:
        ``[B, d] -> [B, C]``.
    """

    def __init__(self, in_dim: int, num_classes: int, nonneg_weights: bool = False) -> None:
        super().__init__(in_dim, num_classes)
        self.nonneg_weights = nonneg_weights

    def effective_weight(self) -> Tensor:
        """The weight matrix ``[C, d]`` used in the forward pass."""
        return self.weight.clamp(min=0) if self.nonneg_weights else self.weight

    def forward(self, x: Tensor) -> Tensor:
        return nn.functional.linear(x, self.effective_weight(), self.bias)
