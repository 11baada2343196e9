"""Argument checks the methods share in ``__init__``: one-line
[`ConfigError`][ncl_lightning.foundation.errors.ConfigError] messages of the form
``<key> must be ..., got <value>`` naming the ``__init__`` argument (the key under
``model.init_args`` in a config). The checks that need the built model and
the data are [`ncl_lightning.methods.preflight.preflight`][].
"""

from __future__ import annotations

from torch import nn

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.options import (
    check_compile_mode,
    check_grad_norm_limit,
    check_nonfinite_loss,
)
from ncl_lightning.foundation.validation import check_at_least, check_range


def check_backbone(backbone: nn.Module) -> None:
    """The backbone exposes an integer ``out_dim >= 1`` (the width heads are built for)."""
    out_dim = getattr(backbone, "out_dim", None)
    if out_dim is None:
        raise ConfigError(
            f"backbone {type(backbone).__name__} must expose an `out_dim` attribute "
            "(its feature width)"
        )
    check_at_least("backbone out_dim", out_dim, 1)


def check_projector(hidden_dim: int, output_dim: int, num_layers: int, low_layers: int = 1) -> None:
    """``ConfigError`` naming ``proj_hidden_dim``/``proj_output_dim``/``proj_num_layers``."""
    check_at_least("proj_num_layers", num_layers, low_layers)
    if num_layers > 0:
        check_at_least("proj_output_dim", output_dim, 1)
    if num_layers > 1:  # a linear projector has no hidden layer
        check_at_least("proj_hidden_dim", hidden_dim, 1)


def check_common_arguments(
    batch_size: int | None,
    warmup_epochs: float,
    min_lr_ratio: float,
    compile_mode: str,
    nonfinite_loss: str,
    grad_norm_limit: float | None,
) -> None:
    """One-line ``ConfigError`` for the arguments of
    [`TrainableModule`][ncl_lightning.methods.TrainableModule] that have a constraint."""
    check_compile_mode(compile_mode)
    if batch_size is not None:
        check_at_least("batch_size", batch_size, 1)
    check_at_least("warmup_epochs", warmup_epochs, 0)
    check_range("min_lr_ratio", min_lr_ratio, 0, 1)
    check_nonfinite_loss(nonfinite_loss)
    check_grad_norm_limit(grad_norm_limit)
