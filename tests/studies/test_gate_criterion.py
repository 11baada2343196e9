"""BayesNCL's Thm. 4.5 (a dimension switches off when γπ(1−π) < λ log(1/ρ)) against the
implementation's gate and KL, and the sensitivity grids that bracket it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from ncl_lightning.methods import BayesNCL
from ncl_lightning.methods.bayesncl import GatedEncoded
from ncl_lightning.nn import SmallCNN
from ncl_lightning.studies import seeds
from ncl_lightning.studies.gate_criterion import (
    GateGains,
    batch_gains,
    gate_threshold,
    measure_gains,
    paper_cost,
    report,
)
from ncl_lightning.studies.study_defs import DIGITS_GAINS, SENSITIVITY_GRIDS, STUDIES

EPS = 0.01  # the release's KL clamp, BayesNCL's default kl_eps


def _model(prior: float, kl_weight: float, temperature: float = 1.0) -> BayesNCL:
    torch.manual_seed(0)
    return BayesNCL(
        SmallCNN(1, 8, 16),
        proj_hidden_dim=32,
        proj_output_dim=12,
        num_classes=0,
        batch_size=8,
        prior=prior,
        kl_weight=kl_weight,
        gate_temperature=temperature,
    ).double()


def _feature(pi: float, n: int = 100) -> torch.Tensor:
    """One binary feature ``[n, 1]`` present on exactly ``round(π n)`` samples."""
    z = torch.zeros(n, 1, dtype=torch.double)
    z[: round(pi * n)] = 1.0
    return z


def _implementation_gradient(model: BayesNCL, logit: float, gamma: float, pi: float) -> float:
    """``∂/∂g`` of (alignment loss + λ KL) for one dimension whose gate logit ``g`` all
    samples share, through the model's own gate (straight-through) and ``kl``.

    The alignment loss of the gated feature ``z̃ = z m`` is
    ``−γ/n Σ_x z̃(x) (z⁺(x) − mean z)`` (the positive view shares the feature, a negative
    has it with frequency π): ``−γ π (1 − π) m``, the paper's alignment gain.
    """
    g = torch.tensor(logit, dtype=torch.double, requires_grad=True)
    z = _feature(pi)
    alpha = torch.sigmoid(g / model.hparams.gate_temperature).expand_as(z)
    mask = model.gate.train()(alpha)
    gated = z * mask
    alignment = -gamma * (gated * (z - z.mean())).mean()
    view = GatedEncoded(h=z, z=gated, alpha=alpha, mask=mask, z_ungated=z)
    loss = alignment + model.hparams.kl_weight * model.kl([view])
    loss.backward()
    assert g.grad is not None
    return float(g.grad)


def _slow_gradient(
    logit: float, gain: float, prior: float, kl_weight: float, temperature: float
) -> float:
    """Central difference of the expected objective ``−G α + λ KL(α ‖ ρ)``, ``α = σ(g/T)``,
    in plain floats (the KL clamped to ``[ε, 1 − ε]`` as the release's)."""

    def objective(g: float) -> float:
        alpha = 1 / (1 + math.exp(-g / temperature))
        a = min(max(alpha, EPS), 1 - EPS)
        rho = min(max(prior, EPS), 1 - EPS)
        kl = a * math.log(a / rho) + (1 - a) * math.log((1 - a) / (1 - rho))
        return -gain * alpha + kl_weight * kl

    h = 1e-6
    return (objective(logit + h) - objective(logit - h)) / (2 * h)


@pytest.mark.parametrize(
    ("prior", "kl_weight", "temperature", "logit", "gamma", "pi"),
    [
        (0.8, 3e-5, 1.0, 0.3, 0.05, 0.2),
        (0.2, 0.03, 1.0, -1.0, 0.4, 0.1),
        (0.05, 0.1, 0.5, 0.0, 1.0, 0.5),
        (0.5, 1.0, 2.0, 2.0, 0.0, 0.3),
        (0.35, 0.01, 1.0, -6.0, 0.2, 0.9),  # α < ε: only the alignment term
    ],
)
def test_the_gate_logit_gradient_is_the_hand_computed_one(
    prior: float, kl_weight: float, temperature: float, logit: float, gamma: float, pi: float
) -> None:
    model = _model(prior, kl_weight, temperature)
    got = _implementation_gradient(model, logit, gamma, pi)
    gain = gamma * pi * (1 - pi)
    expected = _slow_gradient(logit, gain, prior, kl_weight, temperature)
    assert got == pytest.approx(expected, rel=1e-6, abs=1e-12)


@pytest.mark.parametrize(("prior", "kl_weight"), [(0.05, 0.02), (0.1, 0.02), (0.2, 0.1)])
def test_a_half_open_gate_closes_exactly_where_the_gain_falls_below_the_threshold(
    prior: float, kl_weight: float
) -> None:
    """Thm. 4.5's statement: at fixed γ, a feature whose frequency π → 1 loses its gain
    γπ(1−π) and is switched off. The sign of the net gradient on a half-open gate's logit
    flips where γπ(1−π) crosses λ log((1 − ρ)/ρ), the paper's λ log(1/ρ) for a sparse ρ."""
    model, gamma = _model(prior, kl_weight), 1.0
    threshold = gate_threshold(prior, kl_weight)
    signs = []
    for percent in range(50, 100):  # π = 0.50 ... 0.99
        pi = percent / 100
        gain = gamma * pi * (1 - pi)
        gradient = _implementation_gradient(model, 0.0, gamma, pi)
        # a positive gradient lowers the logit under descent: the gate closes
        assert (gradient > 0) == (gain < threshold), (pi, gain, threshold)
        signs.append(gradient > 0)
    assert signs[0] is False and signs[-1] is True  # the grid brackets the flip
    # The paper's cost differs by λ log(1/(1 − ρ)), the closed gate's KL (small for small ρ).
    assert paper_cost(prior, kl_weight) - threshold == pytest.approx(
        kl_weight * math.log(1 / (1 - prior))
    )


@pytest.mark.parametrize("prior", [0.5, 0.8, 0.9])
def test_for_a_prior_of_one_half_or_more_the_kl_switches_no_dimension_off(prior: float) -> None:
    """Where the paper's form and the implementation disagree: at ρ ≥ 0.5 the KL pulls a
    half-open gate *open*, so a gain between 0 and λ log(1/ρ) keeps its dimension."""
    kl_weight = 0.3
    model = _model(prior, kl_weight)
    assert gate_threshold(prior, kl_weight) <= 1e-15
    gamma, pi = 1.0, 0.99  # gain 0.0099 < λ log(1/ρ) (0.032 at ρ = 0.9)
    assert gamma * pi * (1 - pi) < paper_cost(prior, kl_weight)
    assert _implementation_gradient(model, 0.0, gamma, pi) < 0  # descent opens it


@pytest.mark.parametrize(
    ("prior", "factor", "opens"),
    [(0.1, 1.3, True), (0.1, 0.7, False), (0.3, 1.3, True), (0.3, 0.7, False)],
)
def test_a_gate_trained_by_the_implementation_ends_on_the_criterions_side(
    prior: float, factor: float, opens: bool
) -> None:
    """Gradient descent on one gate logit (model's gate and KL), from a half-open gate."""
    kl_weight, gamma = 0.05, 1.0
    model = _model(prior, kl_weight)
    target = factor * gate_threshold(prior, kl_weight)
    pi = (1 - math.sqrt(1 - 4 * target / gamma)) / 2  # γπ(1 − π) = target, π < 0.5
    g = torch.zeros((), dtype=torch.double, requires_grad=True)
    optimiser = torch.optim.SGD([g], lr=50.0)
    z = _feature(pi, n=1000)
    for _ in range(400):
        optimiser.zero_grad()
        alpha = torch.sigmoid(g).expand_as(z)
        mask = model.gate.train()(alpha)
        alignment = -gamma * (z * mask * (z - z.mean())).mean()
        view = GatedEncoded(h=z, z=z * mask, alpha=alpha, mask=mask, z_ungated=z)
        (alignment + kl_weight * model.kl([view])).backward()
        optimiser.step()
    alpha = torch.sigmoid(g).item()
    assert (alpha > 0.5) == opens, alpha
    # it settles where the net gradient vanishes: logit α = logit ρ + G/λ
    gain = gamma * z.mean().item() * (1 - z.mean().item())
    assert math.log(alpha / (1 - alpha)) == pytest.approx(
        math.log(prior / (1 - prior)) + gain / kl_weight, abs=1e-3
    )


def test_measured_gains_are_the_training_gradient_on_the_gate_logits() -> None:
    """``batch_gains`` is what the training objective's gradient on the gating head's
    logits reads: ``α(1−α)/T · (V·B)⁻¹ · [−G + λ (logit α − logit ρ)]``."""
    prior, kl_weight, temperature = 0.3, 0.1, 1.5
    model = _model(prior, kl_weight, temperature).train()
    torch.manual_seed(1)
    views = [torch.randn(8, 1, 8, 8, dtype=torch.double) for _ in range(2)]
    logits: list[torch.Tensor] = []

    def keep(module: torch.nn.Module, inputs: object, output: torch.Tensor) -> None:
        output.retain_grad()
        logits.append(output)

    handle = model.gating_head.register_forward_hook(keep)
    encoded = [model.encode(x) for x in views]
    model.objective(encoded).backward()
    handle.remove()
    gain, active, mask = batch_gains(model, views)
    alpha = torch.cat([e.alpha for e in encoded]).detach()
    inside = (alpha > EPS) & (alpha < 1 - EPS)
    rho = math.log(prior / (1 - prior))
    kl_slope = torch.where(inside, torch.log(alpha / (1 - alpha)) - rho, torch.zeros_like(alpha))
    expected = alpha * (1 - alpha) / temperature / gain.shape[0] * (-gain + kl_weight * kl_slope)
    got = torch.cat([t.grad for t in logits if t.grad is not None])
    torch.testing.assert_close(got, expected)
    assert torch.equal(mask, torch.cat([e.mask for e in encoded]).detach())
    assert active.dtype == torch.bool and gain.shape == active.shape == mask.shape
    # a sample without the feature (z⁺ = 0) has no gain: opening its gate changes nothing
    assert (gain[~active] == 0).all()
    summary = measure_gains(model, [(views, None)])
    torch.testing.assert_close(summary.gain, gain.mean(0).float())
    torch.testing.assert_close(summary.frequency, active.double().mean(0).float())


def _grid_of(name: str, tmp_path: Path) -> list[tuple[float, float]]:
    """The ``(ρ, λ)`` of every row of a study, read from its cells' commands (the demo
    config's ρ = 0.8, λ = 3e-5 where a row does not set them)."""
    grid = []
    for cell in seeds.cells_of(STUDIES.get(name)(), [0], tmp_path, []):
        values = {"prior": 0.8, "kl_weight": 3e-5}
        for key in values:
            flag = f"--model.init_args.{key}"
            at = [i for i, a in enumerate(cell.command) if a == flag]
            if at:
                values[key] = float(cell.command[at[-1] + 1])
        grid.append((values["prior"], values["kl_weight"]))
    return grid


@pytest.mark.parametrize("name", sorted(SENSITIVITY_GRIDS))
def test_every_sensitivity_grid_brackets_the_criterion_on_digits(name: str, tmp_path: Path) -> None:
    """Each study's threshold runs from below the digits demo's small gains (no dimension
    off) to above its large ones (every dimension off): the implementation's
    λ log((1 − ρ)/ρ) where it can be positive; at the paper's ρ = 0.8 it never is, and the
    λ study brackets the paper's λ log(1/ρ) instead (the two forms' disagreement)."""
    grid = SENSITIVITY_GRIDS[name]
    assert _grid_of(name, tmp_path) == list(grid)
    low, high = DIGITS_GAINS
    exact = [gate_threshold(rho, lam) for rho, lam in grid]
    paper = [paper_cost(rho, lam) for rho, lam in grid]
    if all(rho >= 0.5 for rho, _ in grid):
        assert max(exact) <= 0
        thresholds = paper
    else:
        thresholds = exact
    assert min(thresholds) < low and max(thresholds) > high, (name, thresholds)
    assert max(paper) > high  # (at λ = 3e-2 the paper's form is 0.0067 at ρ = 0.8 already)
    # the paper's defaults are a row of every λ study, the paper's ρ of the ρ study
    if "prior" in name:
        assert 0.8 in [rho for rho, _ in grid] and min(rho for rho, _ in grid) <= 0.05
    else:
        assert 3e-5 in [lam for _, lam in grid]


def test_the_report_counts_the_live_dimensions_each_threshold_switches_off() -> None:
    gain = torch.tensor([-0.1, 0.0, 0.001, 0.01, 0.05, 0.2])
    pi = torch.tensor([0.99, 0.0, 0.5, 0.2, 0.1, 0.3])  # the second is dead: never counted
    gamma = gain / (pi * (1 - pi))
    gains = GateGains(gain, pi, gamma, torch.ones(6), samples=10)
    assert gains.switched_off(0.0) == 1 and gains.switched_off(0.02) == 3
    assert gains.switched_off(1.0) == 5
    text = report(gains, [(0.8, 3e-5), (0.05, 0.1)])
    assert "5 live dimensions of 6" in text
    # ρ = 0.05, λ = 0.1: both thresholds (0.30, 0.29) above every gain
    assert "| 0.05 | 0.1 | 0.3 | 5 / 5 | 0.294 | 5 / 5 |" in text
    # the paper's defaults: 7e-6 and a negative threshold, only the negative gain off
    assert "| 0.8 | 3e-05 | 6.69e-06 | 1 / 5 | -4.16e-05 | 1 / 5 |" in text
