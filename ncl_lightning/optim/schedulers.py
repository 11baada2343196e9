"""Learning-rate schedules stepped once per optimisation step."""

from __future__ import annotations

import math

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.validation import check_int, check_range


class _WarmupCosineFactor:
    """Multiplicative lr factor of [`warmup_cosine`][] (a class so checkpoints pickle it)."""

    def __init__(self, warmup_steps: int, total_steps: int, min_lr_ratio: float) -> None:
        # A run shorter than its warm-up warms up over the whole run instead.
        self.warmup_steps = min(warmup_steps, total_steps)
        self.total_steps = total_steps
        self.min_lr_ratio = min_lr_ratio

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            # (step + 1): the first step already moves (lr/warmup, "~0"), the last warm-up
            # step reaches the base lr exactly.
            return (step + 1) / self.warmup_steps
        decay_steps = self.total_steps - self.warmup_steps
        if decay_steps <= 0:
            return self.min_lr_ratio
        progress = min((step - self.warmup_steps) / decay_steps, 1.0)
        cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
        return self.min_lr_ratio + (1.0 - self.min_lr_ratio) * cosine


def warmup_cosine(
    optimizer: Optimizer, warmup_steps: int, total_steps: int, min_lr_ratio: float = 0.0
) -> LambdaLR:
    """Linear warm-up followed by cosine decay (Goyal et al., 2017; Loshchilov & Hutter, 2017).

    With base lr ``b`` (per param group) and step ``t`` (0-based, one per optimiser step):

    * ``t < W``: ``b * (t + 1) / W`` (linear from ``b / W`` to ``b``);
    * ``W <= t <= T``: ``b * (m + (1 - m) * 0.5 * (1 + cos(pi * (t - W) / (T - W))))``,
      so the first post-warm-up step uses ``b`` and step ``T`` uses ``m * b``;
    * ``t > T``: ``m * b``.

    ``W = 0`` means no warm-up. If ``T <= W`` the warm-up is shortened to ``T`` steps and
    the lr is ``m * b`` from step ``T`` on.

    Args:
        optimizer: Wrapped optimiser; its groups' current ``lr`` are the base lrs.
        warmup_steps: Number of warm-up steps ``W`` (>= 0).
        total_steps: Total number of optimisation steps ``T`` (>= 1).
        min_lr_ratio: Final lr as a fraction ``m`` of the base lr, in ``[0, 1]``.

    Returns:
        A ``LambdaLR`` to be stepped after every ``optimizer.step()`` (Lightning
        ``interval="step"``).
    """
    check_int("warmup_steps", warmup_steps, 0)
    check_int("total_steps", total_steps, 1)
    check_range("min_lr_ratio", min_lr_ratio, 0, 1)
    return LambdaLR(optimizer, _WarmupCosineFactor(warmup_steps, total_steps, min_lr_ratio))


class _WarmupStepFactor:
    """Multiplicative lr factor of [`warmup_step`][] (a class so checkpoints pickle it)."""

    def __init__(
        self, warmup_steps: int, steps_per_epoch: int, milestones: list[int], gamma: float
    ) -> None:
        self.warmup_steps = warmup_steps
        self.steps_per_epoch = steps_per_epoch
        self.milestones = sorted(milestones)
        self.gamma = gamma

    def __call__(self, step: int) -> float:
        warm = (step + 1) / self.warmup_steps if step < self.warmup_steps else 1.0
        epoch = step // self.steps_per_epoch
        return warm * self.gamma ** sum(epoch >= m for m in self.milestones)


def warmup_step(
    optimizer: Optimizer,
    warmup_steps: int,
    steps_per_epoch: int,
    milestones: list[int],
    gamma: float = 0.1,
) -> LambdaLR:
    """Linear warm-up, then the lr multiplied by ``gamma`` at each milestone epoch
    (PyTorch's ``MultiStepLR`` laid out in optimisation steps).

    With base lr ``b``, step ``t`` (0-based) and epoch ``e = t // steps_per_epoch``: the lr
    is ``b · w(t) · gamma^#{m ∈ milestones : e >= m}``, ``w(t) = (t + 1) / W`` during the
    ``W`` warm-up steps and 1 after. The linear probe of the NCL release on ImageNet-100
    uses ``milestones [60, 80]``, ``gamma 0.1``, no warm-up.

    Args:
        optimizer: Wrapped optimiser; its groups' current ``lr`` are the base lrs.
        warmup_steps: Number of warm-up steps ``W`` (>= 0).
        steps_per_epoch: Optimisation steps per epoch (>= 1).
        milestones: Epochs at whose start the lr is multiplied by ``gamma`` (each >= 1).
        gamma: Decay factor, in ``(0, 1]``.

    Returns:
        A ``LambdaLR`` to be stepped after every ``optimizer.step()``.
    """
    check_int("warmup_steps", warmup_steps, 0)
    check_int("steps_per_epoch", steps_per_epoch, 1)
    if not milestones or any(not isinstance(m, int) or m < 1 for m in milestones):
        raise ConfigError(
            f"lr_milestones must be a non-empty list of epochs >= 1, got {milestones!r}",
            key="lr_milestones",
        )
    check_range("lr_gamma", gamma, 0, 1, closed="(]")
    return LambdaLR(optimizer, _WarmupStepFactor(warmup_steps, steps_per_epoch, milestones, gamma))
