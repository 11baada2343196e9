"""When does BayesNCL's KL term switch a dimension off? Theorem 4.5 of the BayesNCL paper
against the implementation, and the alignment gains of a trained model.

The paper ("Bayesian Gated Non-Negative Contrastive Learning", ICML 2026, Thm. 4.5): a
feature of frequency ``π_k`` brings an *alignment gain* ``γ · π_k (1 − π_k)`` and costs
``λ · log(1/ρ)`` (the KL of an always-open gate from the ``Bern(ρ)`` prior); the dimension
is switched off when ``γ π_k (1 − π_k) < λ log(1/ρ)``.

In the implementation ([`BayesNCL`][ncl_lightning.methods.BayesNCL]) the gate logit
``g`` of one sample and dimension, ``α = σ(g / T)``, gets (straight-through, so
``∂m/∂α = 1``)::

    ∂/∂g [L_c + λ · KL] = α(1 − α)/T · (V·B)⁻¹ · [−G + λ · (logit α − logit ρ)]

with ``G = −(V·B) · ∂L_c/∂m`` the sample's alignment gain (``V`` views of ``B`` images:
the KL is averaged over both) and ``α``, ``ρ`` inside the KL's clamp ``[ε, 1 − ε]``. A
half-open gate (``α`` at the threshold ``t = 0.5``) is pushed closed exactly when
``G < λ · log((1 − ρ)/ρ)`` ([`gate_threshold`][]): the paper's ``λ log(1/ρ)`` less
``λ log(1/(1 − ρ))``, the cost of the closed gate that the paper's form leaves out. Both
agree for a sparse prior (``ρ → 0``); for ``ρ ≥ 0.5`` the implementation's threshold is
``≤ 0``: the KL term then *opens* gates and switches nothing off, whatever ``λ``.

Averaged over the samples, the gain of dimension ``k`` is the paper's
``γ π_k (1 − π_k)``: [`measure_gains`][] reads it from a checkpoint (``π_k``: how often
``z⁺_k > 0``; ``γ_k``: the gain over ``π_k (1 − π_k)``)::

    python -m ncl_lightning.studies.gate_criterion runs/.../checkpoints/last.ckpt
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import Tensor

from ncl_lightning.foundation.errors import ConfigError, UsageError
from ncl_lightning.foundation.validation import check_at_least, check_range
from ncl_lightning.methods.bayesncl import BayesNCL, GatedEncoded
from ncl_lightning.runtime.errors import ToolArgumentParser, run_main

PROG = "python -m ncl_lightning.studies.gate_criterion"
QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)


def paper_cost(prior: float, kl_weight: float) -> float:
    """The paper's sparsity cost ``λ · log(1/ρ)`` (Thm. 4.5): the KL of an always-open gate
    from ``Bern(ρ)``, times ``λ``."""
    check_range("prior", prior, 0, 1, closed="()")
    check_at_least("kl_weight", kl_weight, 0)
    return kl_weight * math.log(1 / prior)


def gate_threshold(
    prior: float, kl_weight: float, threshold: float = 0.5, eps: float = 0.01
) -> float:
    """The alignment gain below which the implementation closes a gate at ``α = t``.

    The net gradient on the gate logit has the sign of ``−G + λ (logit t − logit ρ)``
    (module docstring), so a gate at the threshold ``t`` is pushed closed when
    ``G < λ (logit t − logit ρ)``: ``λ log((1 − ρ)/ρ)`` at ``t = 0.5``. ``ρ`` is clamped
    to ``[ε, 1 − ε]`` as in [`bernoulli_kl`][ncl_lightning.nn.gates.bernoulli_kl]; a
    ``t`` outside ``(ε, 1 − ε)`` gets no KL gradient (threshold 0).

    Args:
        prior: ``ρ`` in (0, 1).
        kl_weight: ``λ ≥ 0``.
        threshold: The gate's ``t`` in (0, 1) (paper: 0.5).
        eps: The KL clamp ``ε`` (release: 0.01).

    Returns:
        The threshold gain (negative for ``ρ > t``: the KL opens such gates).
    """
    check_range("prior", prior, 0, 1, closed="()")
    check_at_least("kl_weight", kl_weight, 0)
    check_range("threshold", threshold, 0, 1, closed="()")
    check_range("kl_eps", eps, 0, 0.5, closed="[)")
    if not eps < threshold < 1 - eps:
        return 0.0
    rho = min(max(prior, eps), 1 - eps)
    return kl_weight * (_logit(threshold) - _logit(rho))


def _logit(p: float) -> float:
    return math.log(p / (1 - p))


class GateGains(NamedTuple):
    """Per-dimension alignment gains of a BayesNCL model (``d`` its feature width)."""

    gain: Tensor
    """``E_x[G_k(x)]`` ``[d]``, ``G = −(V·B) · ∂L_c/∂m``: the paper's ``γ π_k (1 − π_k)``."""
    frequency: Tensor
    """``π_k``: how often ``z⁺_k > 0`` (before the gate) ``[d]``."""
    gamma: Tensor
    """``γ_k = gain / (π_k (1 − π_k))`` ``[d]`` (NaN where ``π_k`` is 0 or 1)."""
    open_rate: Tensor
    """How often the gate of dimension ``k`` is open ``[d]``."""
    samples: int
    """Samples (views × images) measured."""

    def live(self) -> Tensor:
        """Dimensions active on some sample, ``0 < π_k`` ``[d]`` (bool)."""
        return self.frequency > 0

    def switched_off(self, cost: float) -> int:
        """Live dimensions whose gain is below ``cost`` (predicted off)."""
        return int((self.live() & (self.gain < cost)).sum())


def batch_gains(
    model: BayesNCL, views: Sequence[Tensor], all_open: bool = False
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-sample alignment gains of one batch of views.

    Args:
        model: A BayesNCL module (used in its current mode, not changed).
        views: ``V`` views ``[B, C, H, W]`` of the same ``B`` images.
        all_open: Every gate open (``m = 1``) instead of the model's hard gates.

    Returns:
        ``G = −(V·B) · ∂L_c/∂m`` ``[V·B, d]`` (views stacked in order), ``z⁺ > 0``
        ``[V·B, d]`` and the mask ``[V·B, d]``.
    """
    encoded, masks = [], []
    for x in views:
        h = model.backbone(x)
        z = model.features(model.projector(h))
        alpha = model.gate_probs(h)
        mask = torch.ones_like(alpha) if all_open else model.gate.hard(alpha).detach()
        mask.requires_grad_(True)
        masks.append(mask)
        encoded.append(GatedEncoded(h=h, z=z * mask, alpha=alpha, mask=mask, z_ungated=z))
    contrastive = super(BayesNCL, model).objective(encoded)  # the loss without the KL
    grads = torch.autograd.grad(contrastive, masks)
    scale = len(views) * views[0].shape[0]  # the KL's mean over views and images
    gain = -scale * torch.cat(grads)
    active = torch.cat([e.z_ungated > 0 for e in encoded])  # type: ignore[operator]
    return gain.detach(), active, torch.cat(masks).detach()


def measure_gains(
    model: BayesNCL, batches: Iterable[Any], max_batches: int | None = None, all_open: bool = False
) -> GateGains:
    """Alignment gains ``G = −(V·B) ∂L_c/∂m`` of every dimension, averaged over samples.

    ``L_c`` is the model's gated contrastive loss (its objective without the KL) on each
    batch of views; the gate is the hard inference mask (its straight-through gradient
    is the gradient on ``m``). The model stays in its mode (eval: BatchNorm reads its running
    statistics; train: it reads the batch's and updates them, as any forward pass does);
    no weight changes.

    Args:
        model: A BayesNCL module.
        batches: ``(views, labels)`` batches, ``views`` a list of ``[B, C, H, W]``.
        max_batches: Stop after this many batches (None: all).
        all_open: Measure with every gate open (``m = 1``: each dimension's gain while all
            are in use, NCL's features) instead of the model's own gates. A dimension
            whose gate is closed on every sample has gain 0 under its own gates (no other
            sample carries it in the loss), so this shows what its gate would weigh.

    Returns:
        The per-dimension gains, frequencies, ``γ`` and gate open rates.

    Raises:
        UsageError: ``model`` is not a BayesNCL module, or no batch was given.
    """
    if not isinstance(model, BayesNCL):
        raise UsageError(f"measure_gains needs a BayesNCL module, got {type(model).__name__}")
    totals: Tensor | None = None  # [3, d]: gain, active, open summed over the samples
    samples = 0
    with torch.enable_grad():
        for i, (views, _) in enumerate(batches):
            if max_batches is not None and i >= max_batches:
                break
            parts = batch_gains(model, list(views), all_open)
            sums = torch.stack([part.double().sum(0) for part in parts])
            totals = sums if totals is None else totals + sums
            samples += parts[0].shape[0]
    if totals is None:
        raise UsageError("measure_gains: no batch to measure")
    total_gain, total_active, total_open = totals
    gain = (total_gain / samples).float()
    pi = (total_active / samples).float()
    spread = pi * (1 - pi)
    gamma = torch.where(spread > 0, gain / spread, torch.full_like(gain, float("nan")))
    return GateGains(gain, pi, gamma, (total_open / samples).float(), samples)


def gain_quantiles(gains: GateGains, quantiles: Sequence[float] = QUANTILES) -> list[float]:
    """Quantiles of the gain over the live dimensions."""
    live = gains.gain[gains.live()]
    if live.numel() == 0:
        raise UsageError("no live dimension (z⁺ is zero on every sample)")
    return torch.quantile(live.double(), torch.tensor(quantiles, dtype=torch.double)).tolist()


def report(gains: GateGains, grid: Sequence[tuple[float, float]]) -> str:
    """Markdown: the gain quantiles, then, for every ``(ρ, λ)`` of ``grid``, both
    thresholds and the live dimensions each predicts off."""
    q = gain_quantiles(gains)
    live = int(gains.live().sum())
    gamma = gains.gamma[torch.isfinite(gains.gamma)].median().item()
    pi = gains.frequency[gains.live()].median().item()
    lines = [
        f"{gains.samples} samples, {live} live dimensions of {gains.gain.numel()}; "
        f"median γ {gamma:.3g}, median π {pi:.3g}",
        "",
        "| quantile | " + " | ".join(f"{p:g}" for p in QUANTILES) + " |",
        "|---" * (len(QUANTILES) + 1) + "|",
        "| gain γπ(1−π) | " + " | ".join(f"{v:.3g}" for v in q) + " |",
        "",
        "| ρ | λ | λ log(1/ρ) | off (paper) | λ log((1−ρ)/ρ) | off (implementation) |",
        "|---|---|---|---|---|---|",
    ]
    for prior, kl_weight in grid:
        paper, exact = paper_cost(prior, kl_weight), gate_threshold(prior, kl_weight)
        lines.append(
            f"| {prior:g} | {kl_weight:g} | {paper:.3g} | {gains.switched_off(paper)} / {live} "
            f"| {exact:.3g} | {gains.switched_off(exact)} / {live} |"
        )
    return "\n".join(lines)


def _study_grid() -> list[tuple[float, float]]:
    from ncl_lightning.studies.study_defs import SENSITIVITY_GRID

    return list(SENSITIVITY_GRID)


def main(argv: Sequence[str] | None = None) -> None:
    """Measure a checkpoint's gains and print them against the sensitivity grid."""
    parser = ToolArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", type=Path, help="a BayesNCL run's last.ckpt")
    parser.add_argument(
        "--config", type=Path, default=None, help="data config (default: the run's config.yaml)"
    )
    parser.add_argument("--batches", type=int, default=None, help="at most this many batches")
    parser.add_argument(
        "--all-open", action="store_true", help="measure with every gate open (m = 1)"
    )
    args = parser.parse_args(argv)

    def work() -> str:
        from ncl_lightning.atlas.data_config import load_datamodule, run_config_of
        from ncl_lightning.checkpoints.load import load_method

        if not args.checkpoint.is_file():
            raise ConfigError(f"{args.checkpoint}: no such checkpoint", key="checkpoint")
        config = args.config or run_config_of(args.checkpoint)
        if config is None:
            raise ConfigError(f"{args.checkpoint}: no config.yaml in its run; give --config")
        model = load_method(args.checkpoint)
        datamodule: Any = load_datamodule(config)
        datamodule.setup("validate")
        gains = measure_gains(model, datamodule.view_dataloader("val"), args.batches, args.all_open)  # type: ignore[arg-type]
        text = report(gains, _study_grid())
        print(text)
        return text

    run_main(PROG, work)


if __name__ == "__main__":
    main()
