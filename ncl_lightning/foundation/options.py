"""The typed choices every trainable module takes, and their checks.

The methods declare their ``__init__`` arguments with these types and check them; the
run-time callbacks that act on them (the non-finite guard, the speed switches) read the same
names. Both sides import them from here, so neither depends on the other.
"""

from __future__ import annotations

from typing import Literal, get_args

from ncl_lightning.foundation.validation import check_choice, check_positive

NonFiniteLoss = Literal["stop", "skip"]
"""What a training step does with a NaN/Inf loss, gradient or buffer: ``stop`` or ``skip``."""

CompileMode = Literal["default", "reduce-overhead", "max-autotune"]
"""``torch.compile`` mode of the ``torch_compile`` switch."""

StepMode = Literal["eager", "compiled", "graphs"]
"""How a self-supervised training step runs: ``eager`` (Lightning's automatic
optimisation, one operator at a time), ``compiled`` (the views' device part, forward + loss
+ probe with its backward, and the optimiser update as ``torch.compile`` graphs under manual
optimisation) or ``graphs`` (the same graphs replayed as CUDA graphs:
``torch.compile(mode="reduce-overhead")``; on a CPU, where there are no CUDA graphs, the
step stays eager and says so once)."""


def check_nonfinite_loss(value: str) -> None:
    """``ConfigError`` naming the valid choices unless ``value`` is ``stop`` or ``skip``."""
    check_choice("nonfinite_loss", value, get_args(NonFiniteLoss))


def check_compile_mode(mode: str) -> None:
    """Raise ``ConfigError`` naming the valid modes when ``mode`` is not one of them."""
    check_choice("compile_mode", mode, get_args(CompileMode))


def check_step_mode(mode: str) -> None:
    """Raise ``ConfigError`` naming the valid modes when ``mode`` is not one of them."""
    check_choice("step_mode", mode, get_args(StepMode))


def check_grad_norm_limit(value: float | None) -> None:
    """``ConfigError`` unless ``value`` is ``None`` or a finite number ``> 0``."""
    if value is not None:
        check_positive("grad_norm_limit", value)
