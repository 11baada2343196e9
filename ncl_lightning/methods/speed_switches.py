"""The speed switches: ``channels_last`` and ``torch.compile``.

Both are ``__init__`` arguments of every [`TrainableModule`][ncl_lightning.methods.TrainableModule]
([`SSLMethod`][ncl_lightning.methods.SSLMethod], [`Classifier`][ncl_lightning.methods.Classifier]),
so
a config turns them on:

.. code-block:: yaml

    trainer:
      precision: bf16-mixed   # the third switch is Lightning's own
    model:
      init_args:
        channels_last: true
        torch_compile: true

The module applies them in Lightning's ``configure_model`` hook (once, before the strategy
wraps the module), so the state dict keeps its plain keys and checkpoints load with the
switches on or off; [`apply_speed_switches`][] does the same without a trainer.

Objectives run outside autocast on float32 features
([`SSLMethod.training_losses`][ncl_lightning.methods.SSLMethod.training_losses]).
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol, runtime_checkable

import torch
from torch import Tensor, nn

from ncl_lightning.foundation.internals import cpu_computes_bf16
from ncl_lightning.foundation.options import CompileMode

_APPLIED = "_speed_switches_applied"


def _channels_last_inputs(module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """Forward pre-hook: 4-d tensor arguments in channels-last memory format."""
    return tuple(
        a.contiguous(memory_format=torch.channels_last)
        if isinstance(a, Tensor) and a.dim() == 4
        else a
        for a in args
    )


@runtime_checkable
class SwitchableModule(Protocol):
    """What [`apply_speed_switches`][] reads (a [`TrainableModule`][] has it).

    ``compile_targets`` names the sub-modules to compile; the loss and the logging stay
    eager.
    """

    channels_last: bool
    torch_compile: bool
    compile_mode: CompileMode
    compile_targets: ClassVar[tuple[str, ...]]


def apply_speed_switches(module: nn.Module) -> None:
    """Apply ``module``'s switches once (later calls do nothing).

    ``channels_last`` converts every 4-d parameter and buffer and the backbone's image
    input to the NHWC memory format (faster convolutions with tensor cores, and with
    oneDNN on CPUs). ``torch_compile`` compiles the modules named in ``compile_targets``
    in place (``nn.Module.compile``) with ``compile_mode``.

    Args:
        module: A [`SwitchableModule`][]; other modules are left alone.
    """
    if not isinstance(module, SwitchableModule) or getattr(module, _APPLIED, False):
        return
    setattr(module, _APPLIED, True)
    if module.channels_last:
        module.to(memory_format=torch.channels_last)
        backbone = getattr(module, "backbone", None)
        if isinstance(backbone, nn.Module):
            backbone.register_forward_pre_hook(_channels_last_inputs)
    if module.torch_compile:
        mode = module.compile_mode
        for name in module.compile_targets:
            target = getattr(module, name, None)
            if isinstance(target, nn.Module):
                target.compile(mode=None if mode == "default" else mode)


def bf16_on_cpu_notice(precision: Any, device: torch.device) -> str | None:
    """The warning for a bf16 run on a CPU that emulates bf16 (``None`` otherwise): such
    a run is much slower than in float32 (a ResNet-18 forward and backward on 32 CIFAR
    images, one thread: 6.8 s in float32, 89 s under bf16 autocast, 13x; 2-core AVX2
    AMD EPYC VM, torch 2.14.1, 2026-11-30)."""
    if not str(precision).startswith("bf16") or device.type != "cpu" or cpu_computes_bf16():
        return None
    return (
        f"precision {precision} on a CPU without bfloat16 units (no AVX512-BF16 or AMX): "
        "torch emulates bf16 and trains many times slower than float32; add "
        "--trainer.precision 32-true "
        "(or --config configs/overlays/smoke.yaml for a quick check)"
    )
