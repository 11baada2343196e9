"""Configuration checks of the LightningModules, raised before any training.

Two kinds:

* argument checks in ``__init__`` (:func:`check_positive`, :func:`check_at_least`, ...):
  one-line :class:`~ncl_lightning.runtime.errors.ConfigError` messages of the form
  ``<key> must be ..., got <value>`` that name the ``__init__`` argument (the key under
  ``model.init_args`` in a config);
* :meth:`ModelChecks.preflight`, which ``ncl-cli`` calls before ``trainer.fit``: it builds
  the optimiser once to check every learning rate, and runs a tiny zero batch shaped like
  the data through the model (eval mode, no gradient) to catch a backbone that does not
  fit the images or whose ``out_dim`` is wrong, before anything is written to disk.
"""

from __future__ import annotations

import math
import re
from typing import Any

import torch
from torch import Tensor, nn

from ncl_lightning.runtime.errors import ConfigError
from ncl_lightning.runtime.validation import check_at_least

OPTIMIZER_LR_KEY = "model.init_args.optimizer.init_args.lr"


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


def _first_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__


_LR_IN_ERROR = re.compile(r"(?:learning rate:?|\blr must be [^,]*, got)\s*(\S+)", re.IGNORECASE)
_CONV_CHANNELS = re.compile(r"to have (\d+) channels, but got (\d+) channels")


class ModelChecks:
    """LightningModule mixin: :meth:`preflight`, the checks that need the built model.

    Uses ``self.optimizer_factory``, ``self.param_groups()``, ``self.hparams``, ``self``'s
    forward and, when present, ``self.backbone`` (with its ``out_dim``).
    """

    hparams: Any

    def preflight(self, example: Tensor | None = None) -> None:
        """Check what only the built model can tell, before ``trainer.fit`` writes anything.

        Builds the optimiser the way ``configure_optimizers`` does (without the trainer)
        and checks every group's learning rate; with ``example``, runs it through the
        model in eval mode under ``torch.no_grad()`` (weights, BatchNorm statistics,
        train/eval modes and the random state are left as they were).

        Args:
            example: A small batch ``[B, C, H, W]`` shaped like the data (zeros suffice;
                ``B = 2``), or ``None`` to skip the forward check.

        Raises:
            ConfigError: A learning rate ``<= 0`` (names the key: the optimiser's ``lr``,
                ``probe_lr``, ``gate_lr``, ...), ``scale_lr`` without ``batch_size``, or a
                model that does not fit the data (input channels, ``out_dim``, shapes).
        """
        self._check_learning_rates()
        if example is not None:
            self._check_forward(example)
            batch_size = self.hparams.get("batch_size")
            if isinstance(batch_size, int) and 0 < batch_size < example.shape[0]:
                self._check_training_batch(example[:batch_size])

    # -- learning rates ---------------------------------------------------------------
    def _check_learning_rates(self) -> None:
        hp = self.hparams
        if hp.get("scale_lr", False) and hp.get("batch_size") is None:
            raise ConfigError(
                "batch_size must be set when scale_lr is true (the per-device batch size "
                "scales the learning rate), got None"
            )
        specs = self.param_groups()  # type: ignore[attr-defined]
        own_lr = [g.get("lr") if isinstance(g, dict) else None for g in specs]  # torch fills
        try:
            optimizer = self.optimizer_factory(specs)  # type: ignore[attr-defined]
        except ValueError as err:  # torch: "Invalid learning rate: -0.1"; LARS: "lr must be"
            match = _LR_IN_ERROR.search(str(err))
            if match:
                raise ConfigError(f"{OPTIMIZER_LR_KEY} must be > 0, got {match.group(1)}") from err
            raise ConfigError(f"model.init_args.optimizer: {_first_line(err)}") from err
        for i, group in enumerate(optimizer.param_groups):
            lr = float(group["lr"])
            if lr > 0 and math.isfinite(lr):
                continue
            own = own_lr[i] if i < len(own_lr) else None  # the group's own rate, if any
            key = OPTIMIZER_LR_KEY if own is None else self._lr_key(own, i)
            problem = "must be > 0" if not lr > 0 else "must be a finite number"
            raise ConfigError(f"{key} {problem}, got {lr!r}")

    def _lr_key(self, lr: float, index: int) -> str:
        """The ``*_lr`` hyper-parameter a group's own rate came from (``probe_lr``, ...)."""
        for name, value in self.hparams.items():
            if name.endswith("_lr") and isinstance(value, int | float) and value == lr:
                return name
        return f"lr of parameter group {index}"

    # -- forward ----------------------------------------------------------------------
    def _check_forward(self, example: Tensor) -> None:
        module: nn.Module = self  # type: ignore[assignment]
        param = next(module.parameters(), None)
        if param is not None:
            example = example.to(device=param.device, dtype=param.dtype)
        modes = {m: m.training for m in module.modules()}
        module.eval()
        try:
            with torch.no_grad(), torch.random.fork_rng(devices=[]):
                backbone = getattr(module, "backbone", None)
                if isinstance(backbone, nn.Module) and hasattr(backbone, "out_dim"):
                    h = self._run(backbone, example)
                    self._check_width(h, backbone.out_dim)
                self._run(module, example)
        finally:
            for m, training in modes.items():
                m.training = training

    def _check_training_batch(self, batch: Tensor) -> None:
        """The forward pass in training mode on a batch of the size training will see
        (``batch_size`` per device and view): BatchNorm refuses a batch of one sample.
        Weights, buffers (BatchNorm statistics), modes and the random state are restored."""
        module: nn.Module = self  # type: ignore[assignment]
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
                f"({_first_line(err)}); set data.init_args.batch_size >= 2"
            ) from err
        finally:
            with torch.no_grad():
                for name, b in module.named_buffers():
                    b.copy_(buffers[name])
            for m, training in modes.items():
                m.training = training

    @staticmethod
    def _run(module: nn.Module, example: Tensor) -> Any:
        try:
            return module(example)
        except (RuntimeError, ValueError) as err:
            channels = _CONV_CHANNELS.search(str(err))
            if channels and int(channels.group(2)) == example.shape[1]:
                raise ConfigError(
                    f"model does not fit the data: the backbone expects {channels.group(1)} "
                    f"input channel(s), the data has {channels.group(2)}"
                ) from err
            shape = list(example.shape[1:])
            raise ConfigError(
                f"model does not fit data of shape {shape}: {_first_line(err)}"
            ) from err

    @staticmethod
    def _check_width(h: Any, out_dim: int) -> None:
        if not isinstance(h, Tensor):
            return  # a backbone returning a structure: the full forward pass decides
        if h.dim() != 2:
            raise ConfigError(
                f"model does not fit the data: the backbone outputs features of shape "
                f"{list(h.shape)} for a batch of {h.shape[0]}, expected [{h.shape[0]}, {out_dim}]"
            )
        if h.shape[1] != out_dim:
            raise ConfigError(
                f"model does not fit the data: the backbone outputs {h.shape[1]} features but "
                f"declares out_dim={out_dim} (the input width of the heads built on it)"
            )
