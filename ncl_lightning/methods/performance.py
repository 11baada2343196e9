"""Speed switches of the LightningModules: ``channels_last`` and ``torch.compile``.

Both are ``__init__`` arguments of :class:`~ncl_lightning.methods.SSLMethod` and
:class:`~ncl_lightning.methods.classifier.Classifier`, so a config turns them on:

.. code-block:: yaml

    trainer:
      precision: bf16-mixed   # the third switch is Lightning's own
    model:
      init_args:
        channels_last: true
        torch_compile: true

They are applied in ``configure_model`` (once, before the strategy wraps the module), so
the state dict keeps its plain keys and checkpoints load with the switches on or off.
Objectives run outside autocast on float32 features (:func:`autocast_off`, :func:`float32`): at
InfoNCE temperatures of 0.1-0.2, bf16 logits (8 bits of mantissa) would round the loss.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar, Literal, NamedTuple

import torch
from torch import Tensor, nn

from ncl_lightning.runtime.validation import check_choice

CompileMode = Literal["default", "reduce-overhead", "max-autotune"]


def _channels_last_inputs(module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """Forward pre-hook: 4-d tensor arguments in channels-last memory format."""
    return tuple(
        a.contiguous(memory_format=torch.channels_last)
        if isinstance(a, Tensor) and a.dim() == 4
        else a
        for a in args
    )


class PerformanceSwitches:
    """Mixin applying ``channels_last`` and ``torch_compile`` from ``self.hparams``.

    ``channels_last`` converts every 4-d parameter and buffer and the backbone's image
    input to the NHWC memory format (faster convolutions with tensor cores, and with
    oneDNN on CPUs). ``torch_compile`` compiles the modules named in ``compile_targets``
    in place (``nn.Module.compile``) with ``compile_mode``.

    Attributes:
        compile_targets: Names of the sub-modules to compile; the loss and the logging
            stay eager. Subclasses add their heads.
    """

    compile_targets: ClassVar[tuple[str, ...]] = ("backbone", "projector")
    hparams: Any

    def configure_model(self) -> None:
        """Apply the switches once (Lightning calls this for every stage)."""
        if getattr(self, "_switches_applied", False):
            return
        self._switches_applied = True
        module: nn.Module = self  # type: ignore[assignment]
        if self.hparams.get("channels_last", False):
            module.to(memory_format=torch.channels_last)
            backbone = getattr(module, "backbone", None)
            if backbone is not None:
                backbone.register_forward_pre_hook(_channels_last_inputs)
        if self.hparams.get("torch_compile", False):
            mode = self.hparams.get("compile_mode", "default")
            for name in self.compile_targets:
                target = getattr(module, name, None)
                if isinstance(target, nn.Module):
                    target.compile(mode=None if mode == "default" else mode)


def check_compile_mode(mode: str) -> None:
    """Raise ``ConfigError`` naming the valid modes when ``mode`` is not one of them."""
    check_choice("compile_mode", mode, ("default", "reduce-overhead", "max-autotune"))


@contextmanager
def autocast_off(device: torch.device) -> Iterator[None]:
    """Leave any autocast region (bf16-mixed / 16-mixed) for the enclosed ops."""
    with torch.autocast(device_type=device.type, enabled=False):
        yield


def float32(encoded: NamedTuple) -> NamedTuple:
    """The same named tuple with every floating tensor in float32 (others unchanged)."""
    return encoded._make(
        t.float() if isinstance(t, Tensor) and t.is_floating_point() else t for t in encoded
    )
