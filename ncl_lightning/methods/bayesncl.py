"""BayesNCL: Bayesian gated Non-negative Contrastive Learning (ICML 2026)."""

from __future__ import annotations

from typing import Any, NamedTuple

from torch import Tensor, nn

from ncl_lightning.foundation.validation import (
    check_at_least,
    check_choice,
    check_positive,
    check_range,
)
from ncl_lightning.methods.ncl import NCL
from ncl_lightning.metrics import OpenFrequency
from ncl_lightning.nn.gates import GATES, bernoulli_kl
from ncl_lightning.nn.heads import MLP
from ncl_lightning.nn.protocols import Backbone, TorchModule
from ncl_lightning.optim import decay_param_groups


class GatedEncoded(NamedTuple):
    """What ``BayesNCL.encode`` returns for ``B`` images (an ``Encoded`` plus the gate)."""

    h: Tensor
    """Backbone features ``[B, D]``."""
    z: Tensor
    """Gated features ``z⁺ ⊙ m`` ``[B, d]`` (what the loss and the metrics read)."""
    alpha: Tensor
    """Gate open probabilities ``α`` ``[B, d]``."""
    mask: Tensor
    """Gate ``m`` ``[B, d]`` (hard 0/1 in the forward pass except for the soft gate)."""
    z_ungated: Tensor | None = None
    """Non-negative features ``z⁺`` before the gate ``[B, d]`` (the release's ``*_z``
    training-log metrics read them; the interpretability callbacks measure them too)."""


class BayesNCL(NCL):
    """NCL whose features are multiplied by a learned per-sample Bernoulli gate.

    A gating head (an MLP on the *detached* backbone features) gives logits ``g``;
    ``α = σ(g / temperature)`` are Bernoulli open probabilities and the gate turns them into
    a mask ``m``. The loss is the NCL objective on ``z⁺ ⊙ m`` plus
    ``λ · mean_x Σ_i KL(Bern(α_i) || Bern(ρ))``. Because the gating head reads detached
    features, the KL term trains the gating head only; the backbone and projector learn only
    from the gated contrastive loss (which also reaches the gating head through the gate's
    straight-through gradient). ``detach_gate_input=False`` is the paper's ablation.

    Args:
        backbone: Encoder exposing ``out_dim``.
        gate: ``ste`` (paper), ``gumbel`` (the release's Gumbel ablation), ``logistic``
            (binary Concrete) or ``soft``, or a gate module (see
            [`ncl_lightning.nn.gates`][]).
        prior: Prior open probability ``ρ`` (paper: 0.8).
        kl_weight: ``λ`` (paper: 3e-5).
        kl_eps: ``α`` and ``ρ`` are clamped to ``[kl_eps, 1 − kl_eps]`` in the KL (release:
            0.01, so an ``α`` outside ``[0.01, 0.99]`` gets no KL gradient).
        gate_temperature: Sigmoid temperature of ``α`` (paper: 1.0).
        threshold: Open when ``α > threshold`` (paper: 0.5).
        gate_layers: Linear layers of the gating head (1, 2 or 3; paper: 2).
        gate_hidden_dim: Hidden width of the gating head (None: the projector's).
        gate_batch_norm: BatchNorm after each hidden layer of the gating head. ``False``
            (default): Linear–ReLU–Linear, the release's head, whose mask is the same
            function of the input in training and at inference (BatchNorm would read batch
            statistics in one and running statistics in the other).
        gate_lr: Learning rate of the gating head (paper: 0.1), *not* scaled by
            ``global batch / 256``: the release scales only ``lr`` and ``classifier_lr``
            by the batch and gives ``optimizer.gating_head_lr`` as is (see
            [`param_groups`][]).
        detach_gate_input: Feed the gating head detached backbone features.
        **kwargs: Everything [`NCL`][ncl_lightning.methods.NCL] takes.
    """

    compile_targets = ("backbone", "projector", "gating_head")

    def __init__(
        self,
        backbone: Backbone,
        gate: str | TorchModule = "ste",
        prior: float = 0.8,
        kl_weight: float = 3e-5,
        kl_eps: float = 0.01,
        gate_temperature: float = 1.0,
        threshold: float = 0.5,
        gate_layers: int = 2,
        gate_hidden_dim: int | None = None,
        gate_batch_norm: bool = False,
        gate_lr: float = 0.1,
        detach_gate_input: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(backbone, **kwargs)
        check_range("prior", prior, 0, 1, closed="()")
        check_at_least("kl_weight", kl_weight, 0)
        check_range("kl_eps", kl_eps, 0, 0.5, closed="[)")
        check_positive("gate_temperature", gate_temperature)
        check_range("threshold", threshold, 0, 1, closed="()")
        check_choice("gate_layers", gate_layers, (1, 2, 3))
        if gate_hidden_dim is not None:
            check_at_least("gate_hidden_dim", gate_hidden_dim, 1)
        check_positive("gate_lr", gate_lr)
        hidden = gate_hidden_dim or self.hparams.get("proj_hidden_dim", backbone.out_dim)
        self.gating_head = MLP(
            backbone.out_dim, hidden, self.projector.out_dim, gate_layers, gate_batch_norm
        )
        self.gate = GATES.build(
            gate, config_key="gate", threshold=threshold, temperature=gate_temperature
        )
        d = self.projector.out_dim
        self.open_frequency = nn.ModuleDict({s: OpenFrequency(d) for s in ("val", "test")})

    def gate_probs(self, h: Tensor) -> Tensor:
        """Open probabilities ``α = σ(g(h) / temperature)`` ``[B, d]``."""
        h = h.detach() if self.hparams.detach_gate_input else h
        return (self.gating_head(h) / self.hparams.gate_temperature).sigmoid()

    def encode(self, x: Tensor) -> GatedEncoded:
        h = self.backbone(x)
        z = self.features(self.projector(h))
        alpha = self.gate_probs(h)
        mask = self.gate(alpha)
        return GatedEncoded(h=h, z=z * mask, alpha=alpha, mask=mask, z_ungated=z)

    def kl(self, views: list[GatedEncoded]) -> Tensor:
        """``mean_x Σ_i KL(Bern(α_i(x)) || Bern(ρ))`` over the views."""
        prior, eps = self.hparams.prior, self.hparams.kl_eps
        kls = (bernoulli_kl(v.alpha, prior, eps).sum(dim=1).mean() for v in views)
        return sum(kls) / len(views)

    def objective(self, views: list[GatedEncoded]) -> Tensor:  # type: ignore[override]
        contrastive = super().objective(views)
        kl = self.kl(views)
        open_rate = sum(v.mask.detach().mean() for v in views) / len(views)
        self.log_train(
            {"train/contrastive": contrastive, "train/kl": kl, "train/gate/open_rate": open_rate}
        )
        return contrastive + self.hparams.kl_weight * kl

    def param_groups(self) -> list[dict[str, Any]]:
        """The base groups without the gating head, then the gating head's groups.

        As the release (``Cui-Peng-624/BayesNCL``, solo-learn: the gating head is one more
        group of its LARS optimiser, with ``lr: optimizer.gating_head_lr``) the gating
        head is split like every other module
        ([`decay_param_groups`][ncl_lightning.optim.decay_param_groups]): its weights get
        the optimiser's weight decay and LARS adaptation (trust ratio, clipping); with
        ``exclude_bias_n_norm`` its biases get neither. Both groups run at ``gate_lr``,
        which ``scale_lr`` leaves alone (``"scale_lr": False``: the release's
        ``solo/args/pretrain.py`` scales only ``optimizer.lr`` and
        ``optimizer.classifier_lr`` by the batch).

        Returns:
            ``[*base groups, gate weights, gate biases]`` (non-empty groups only; one gate
            group without ``exclude_bias_n_norm``).
        """
        gate_ids = {id(p) for p in self.gating_head.parameters()}
        groups = []
        for group in super().param_groups():
            params = [p for p in group["params"] if id(p) not in gate_ids]
            if params:
                groups.append({**group, "params": params})
        gate = decay_param_groups(self.gating_head, self.exclude_bias_n_norm)
        for group in gate:
            group.update(lr=self.hparams.gate_lr, scale_lr=False)
        return [*groups, *gate]

    def _eval_step(self, batch: tuple[Tensor, Tensor], stage: str) -> GatedEncoded:
        out = super()._eval_step(batch, stage)
        self.open_frequency[stage].update(out.mask)
        return out

    def on_validation_epoch_end(self) -> None:
        self._log_gate("val")

    def on_test_epoch_end(self) -> None:
        self._log_gate("test")

    def _log_gate(self, stage: str) -> None:
        """Log ``{stage}/gate/open_rate`` and the per-dimension open-frequency summary."""
        metric = self.open_frequency[stage]
        if metric.update_called:
            # compute() summed the counts over the ranks: equal values on every rank, so
            # sync_dist=True averages equal numbers (cheap, once per evaluation, no warning).
            for key, value in metric.compute().items():
                self.log(f"{stage}/gate/{key}", value, sync_dist=True)
            metric.reset()
