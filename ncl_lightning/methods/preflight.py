"""Checks that need the built model, run before anything is trained or written.

[`preflight`][] builds the optimiser once to check every learning rate, and runs a tiny
zero batch shaped like the data through the model (eval mode, no gradient) to catch a
backbone that does not fit the images or whose ``out_dim`` is wrong; with a training batch
size below the example's, it also runs one training-mode forward pass of that size
(BatchNorm refuses a batch of one). [`check_batch_negatives`][] refuses a batch
without negatives for a contrastive loss. The module runs them itself
([`TrainableModule.check_data`][ncl_lightning.methods.TrainableModule.check_data] and
[`check_fit`][ncl_lightning.methods.TrainableModule.check_fit], at ``setup``); ``ncl-cli``
calls the same hooks earlier, before anything is written.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from ncl_lightning.data.batch_scope import per_device_batch
from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.protocols import ImageShape, MultiViewData
from ncl_lightning.foundation.validation import check_positive

if TYPE_CHECKING:
    from ncl_lightning.methods.trainable import TrainableModule

OPTIMIZER_LR_KEY = "model.init_args.optimizer.init_args.lr"


def _first_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__


def preflight(module: TrainableModule, example: Tensor | None = None) -> None:
    """Check what only the built model can tell, before ``trainer.fit`` writes anything.

    Builds the optimiser the way ``configure_optimizers`` does (without the trainer)
    and checks every group's learning rate; with ``example``, runs it through the
    model in eval mode under ``torch.no_grad()`` (weights, BatchNorm statistics,
    train/eval modes and the random state are left as they were).

    Args:
        module: The module to check.
        example: A small batch ``[B, C, H, W]`` shaped like the data (zeros suffice;
            ``B = 2``), or ``None`` to skip the forward check.

    Raises:
        ConfigError: A learning rate ``<= 0`` (names the key: the optimiser's ``lr``,
            ``probe_lr``, ``gate_lr``, ...), or a model that does not fit the data (input
            channels, ``out_dim``, shapes).
    """
    _check_learning_rates(module)
    if example is not None:
        _check_forward(module, example)
        batch_size = module.batch_size
        if isinstance(batch_size, int) and 0 < batch_size < example.shape[0]:
            _check_training_batch(module, example[:batch_size])


def example_batch(datamodule: Any) -> Tensor | None:
    """Two zero images shaped like the DataModule's (its ``in_channels`` and
    ``image_size``), or ``None`` when it does not say."""
    if isinstance(datamodule, ImageShape):
        channels, size = datamodule.in_channels, datamodule.image_size
        if isinstance(channels, int) and isinstance(size, int):
            return torch.zeros(2, channels, size, size)
    return None


# -- negatives in the batch ----------------------------------------------------------


def needs_negatives(module: nn.Module) -> bool:
    """Whether ``module``'s loss contrasts each sample with the other samples of the batch
    (InfoNCE, the spectral loss, SupCon): a loss module with ``gather_distributed``, or one
    that says so with ``needs_negatives``."""
    loss = getattr(module, "loss_fn", None)
    declared = getattr(loss, "needs_negatives", None)
    if isinstance(declared, bool):
        return declared
    return isinstance(loss, nn.Module) and hasattr(loss, "gather_distributed")


def check_batch_negatives(module: nn.Module, datamodule: Any, world_size: int) -> None:
    """A contrastive loss gets other images of the batch to contrast with: at least 2
    images in every training batch the loss sees.

    The loss sees this process' batch, or with ``gather_distributed`` under DDP the
    batches of all ``world_size`` processes. With ``drop_last: false`` the last batch of
    an epoch holds the remainder of the split (each process gets ``ceil(n / world_size)``
    samples, as ``DistributedSampler`` pads).

    Args:
        module: The method (left alone unless [`needs_negatives`][]).
        datamodule: The DataModule (``batch_size``, ``batch_scope``, ``drop_last``,
            ``split_size``); left alone without ``batch_size``.
        world_size: Training processes (``trainer.world_size``).

    Raises:
        ConfigError: Naming ``data.init_args.batch_size`` (or ``drop_last``) and the method.
    """
    batch_size = getattr(datamodule, "batch_size", None)
    if not needs_negatives(module) or not isinstance(batch_size, int):
        return
    world = max(1, world_size)
    scope = getattr(datamodule, "batch_scope", "device")
    per_device = per_device_batch(batch_size, scope, world)
    gathered = world > 1 and bool(getattr(module.loss_fn, "gather_distributed", False))
    seen = world if gathered else 1
    name = type(module).__name__
    why = f"{name}'s loss contrasts each image with the other images of its batch"
    if per_device * seen < 2:
        where = f" ({per_device} per process x {world} processes)" if world > 1 else ""
        fix = "" if gathered or world == 1 else " or model.init_args.gather_distributed: true"
        raise ConfigError(
            f"data.init_args.batch_size={batch_size}: {why}, and a batch of "
            f"{per_device * seen}{where} has none; set data.init_args.batch_size >= 2{fix}",
            key="data.init_args.batch_size",
        )
    size = getattr(datamodule, "split_size", None)
    if getattr(datamodule, "drop_last", True) or not callable(size):
        return
    samples = int(size("train"))
    last = math.ceil(samples / world) % per_device
    if last and last * seen < 2:
        raise ConfigError(
            f"data.init_args.drop_last: false leaves a last training batch of {last * seen} "
            f"image(s) ({samples} samples, batch_size={batch_size}): {why}, and that batch "
            "has none; set data.init_args.drop_last: true, or a batch_size that leaves 2 or "
            "more images in the last batch",
            key="data.init_args.drop_last",
        )


# -- learning rates -------------------------------------------------------------------
def _check_learning_rates(module: TrainableModule) -> None:
    # scale_lr with batch_size None is checked at configure_optimizers: the training
    # loader's batch_size, not built yet here, is the one that scales the rates.
    specs = module.param_groups()
    own_lr = [g.get("lr") if isinstance(g, dict) else None for g in specs]  # torch fills
    # The CLI builds the factory as a partial with the optimiser's keyword arguments: its
    # ``lr`` is checked before torch sees it; a group's own rate is checked after.
    lr = getattr(module.optimizer_factory, "keywords", {}).get("lr")
    if isinstance(lr, int | float):
        check_positive(OPTIMIZER_LR_KEY, lr)
    try:
        optimizer = module.optimizer_factory(specs)
    except ValueError as err:
        raise ConfigError(
            f"model.init_args.optimizer: {_first_line(err)}", key="model.init_args.optimizer"
        ) from err
    for i, group in enumerate(optimizer.param_groups):
        lr = float(group["lr"])
        if lr > 0 and math.isfinite(lr):
            continue
        own = own_lr[i] if i < len(own_lr) else None  # the group's own rate, if any
        check_positive(OPTIMIZER_LR_KEY if own is None else _lr_key(module, own, i), lr)


def _lr_key(module: TrainableModule, lr: float, index: int) -> str:
    """The ``*_lr`` hyper-parameter a group's own rate came from (``probe_lr``, ...)."""
    for name, value in module.hparams.items():
        if name.endswith("_lr") and isinstance(value, int | float) and value == lr:
            return name
    return f"lr of parameter group {index}"


# -- forward --------------------------------------------------------------------------
def _check_forward(module: nn.Module, example: Tensor) -> None:
    param = next(module.parameters(), None)
    if param is not None:
        example = example.to(device=param.device, dtype=param.dtype)
    modes = {m: m.training for m in module.modules()}
    module.eval()
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            backbone = getattr(module, "backbone", None)
            if isinstance(backbone, nn.Module) and hasattr(backbone, "out_dim"):
                h = _run(backbone, example)
                _check_width(h, backbone.out_dim)
            _run(module, example)
    finally:
        for m, training in modes.items():
            m.training = training


def _check_training_batch(module: nn.Module, batch: Tensor) -> None:
    """The forward pass in training mode on a batch of the size training will see
    (``batch_size`` per device and view): BatchNorm refuses a batch of one sample.
    Weights, buffers (BatchNorm statistics), modes and the random state are restored."""
    param = next(module.parameters(), None)
    if param is not None:
        batch = batch.to(device=param.device, dtype=param.dtype)
    modes = {m: m.training for m in module.modules()}
    buffers = {name: b.detach().clone() for name, b in module.named_buffers()}
    module.train()
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            module(batch)
    except (RuntimeError, ValueError) as err:
        raise ConfigError(
            f"batch_size={batch.shape[0]} is too small for training this model "
            f"({_first_line(err)}); set data.init_args.batch_size >= 2",
            key="data.init_args.batch_size",
        ) from err
    finally:
        with torch.no_grad():
            for name, b in module.named_buffers():
                b.copy_(buffers[name])
        for m, training in modes.items():
            m.training = training


def _run(module: nn.Module, example: Tensor) -> Any:
    try:
        return module(example)
    except (RuntimeError, ValueError) as err:
        convs = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
        stem = next((m for m in module.modules() if isinstance(m, convs)), None)
        if stem is not None and example.dim() > 1 and stem.in_channels != example.shape[1]:
            raise ConfigError(
                f"model does not fit the data: the backbone expects {stem.in_channels} "
                f"input channel(s), the data has {example.shape[1]}",
                key="model.init_args.backbone",
            ) from err
        shape = list(example.shape[1:])
        raise ConfigError(
            f"model does not fit data of shape {shape}: {_first_line(err)}",
            key="model.init_args.backbone",
        ) from err


def _check_width(h: Any, out_dim: int) -> None:
    if not isinstance(h, Tensor):
        return  # a backbone returning a structure: the full forward pass decides
    if h.dim() != 2:
        raise ConfigError(
            f"model does not fit the data: the backbone outputs features of shape "
            f"{list(h.shape)} for a batch of {h.shape[0]}, expected [{h.shape[0]}, {out_dim}]",
            key="model.init_args.backbone",
        )
    if h.shape[1] != out_dim:
        raise ConfigError(
            f"model does not fit the data: the backbone outputs {h.shape[1]} features but "
            f"declares out_dim={out_dim} (the input width of the heads built on it)",
            key="model.init_args.backbone",
        )


def check_views(name: str, views_per_image: int, datamodule: Any) -> None:
    """The views per image the DataModule yields are those the method ``name`` trains on."""
    given = datamodule.n_views if isinstance(datamodule, MultiViewData) else None
    if isinstance(given, int) and given != views_per_image:
        raise ConfigError(
            f"data.init_args.n_views: {name} trains on {views_per_image} views per "
            f"image, got {given}"
        )
