"""Split a model's parameters into weight-decayed and non-decayed sets.

SimCLR/BYOL practice (Chen et al., 2020; Grill et al., 2020): no weight decay and no
LARS adaptation on biases and normalisation parameters.
"""

from __future__ import annotations

from torch import nn

NORM_LAYERS: tuple[type[nn.Module], ...] = (
    nn.BatchNorm1d,
    nn.BatchNorm2d,
    nn.BatchNorm3d,
    nn.SyncBatchNorm,
    nn.InstanceNorm1d,
    nn.InstanceNorm2d,
    nn.InstanceNorm3d,
    nn.LayerNorm,
    nn.GroupNorm,
    nn.LocalResponseNorm,
    nn.RMSNorm,
)


def split_decay_params(
    module: nn.Module,
) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """Split trainable parameters into (decayed, not decayed).

    Not decayed: every parameter named ``bias`` and every parameter of a normalisation
    layer (``NORM_LAYERS``). Frozen parameters (``requires_grad=False``) are left out;
    a parameter shared between modules appears once, in "not decayed" if any owner
    says so.

    Args:
        module: The model.

    Returns:
        ``(decay, no_decay)`` lists in ``module.parameters()`` order.
    """
    no_decay_ids: set[int] = set()
    for submodule in module.modules():
        is_norm = isinstance(submodule, NORM_LAYERS)
        for name, param in submodule.named_parameters(recurse=False):
            if is_norm or name == "bias":
                no_decay_ids.add(id(param))

    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    for param in module.parameters():  # already de-duplicated by torch
        if not param.requires_grad:
            continue
        (no_decay if id(param) in no_decay_ids else decay).append(param)
    return decay, no_decay


def decay_param_groups(
    module: nn.Module, exclude_bias_n_norm: bool = True, skip: set[int] | None = None
) -> list[dict]:
    """Optimiser groups of ``module``'s trainable parameters.

    Args:
        module: The model.
        exclude_bias_n_norm: Put biases and norm parameters in their own group without
            weight decay and without LARS adaptation (``lars_exclude``).
        skip: ``id``s of parameters that another group owns (e.g. a probe head).

    Returns:
        Non-empty groups: ``[{"params": decay}, {"params": no_decay, ...}]`` or one group.
    """
    skip = skip or set()
    decay, no_decay = (
        [p for p in group if id(p) not in skip] for group in split_decay_params(module)
    )
    if exclude_bias_n_norm:
        groups = [
            {"params": decay},
            {"params": no_decay, "weight_decay": 0.0, "lars_exclude": True},
        ]
    else:
        groups = [{"params": decay + no_decay}]
    return [g for g in groups if g["params"]]
