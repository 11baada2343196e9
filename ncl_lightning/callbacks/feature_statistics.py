"""``FeatureStatistics``: every interpretability metric of docs/metrics.md, during training.

At validation (every ``every_n_epochs`` epochs) and at every test, the callback streams
the features the method's ``validation_step`` / ``test_step`` return ([`Encoded`][]:
``z``, the features entering the objective after the non-negative map or gate, and ``h``,
the backbone output) into torchmetrics states, and logs
``{stage}/{space}/{metric}`` (e.g. ``val/z/semantic_consistency``). Beside ours it logs
the quantities the NCL and BayesNCL releases report under the same names
(``spectral_entropy``, ``orthogonality_mean_all_entries``, ...; docs/metrics.md, "Compare
with the paper"), derived from the same states where they can be. A field ``z_ungated``
of the eval steps' output (BayesNCL's ``z⁺`` before the gate) is measured too whenever
the method returns it. SEPIN needs two augmented views of held-out images, so after the
loop it encodes the DataModule's ``view_dataloader`` (this rank's shard) and logs
``{stage}/z/sepin@k``. The per-dimension vectors of ``z`` go to the loggers that take a
table (``FeatureStatistics.dimensions``).

The callback never looks inside the method: a method changes what is measured by
changing ``encode`` (BayesNCL's gated features, for example), not by editing this file.
Values are synchronised across ranks by the metrics themselves (sum / cat reductions), so
2 ranks log what 1 process would, and every rank holds the same number. They are logged
with ``sync_dist=True`` all the same: the mean of identical values is that value, whereas
``sync_dist=False`` draws Lightning's "use ``sync_dist=True``" warning for every key, and
logging on rank 0 alone would hide the keys from a checkpoint monitor on the other ranks.
"""

from __future__ import annotations

from typing import Any, Literal

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor, nn
from torchmetrics import Metric

from ncl_lightning.callbacks.schedule import EvalStream, batch_limit, check_spaces, missing_spaces
from ncl_lightning.callbacks.top_activations import TopActivations
from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.protocols import ClassLabels, ViewData, require_extra
from ncl_lightning.foundation.validation import check_at_least, check_choice, check_int
from ncl_lightning.metrics import (
    ActiveDimensions,
    EffectiveRank,
    ExpectedActivation,
    OrthogonalityError,
    RetrievalPrecision,
    SemanticConsistency,
    SemanticEntropy,
    Sparsity,
    TopKSemanticConsistency,
)
from ncl_lightning.metrics.functional import (
    OrthogonalityReduction,
    effective_rank_from_gram,
    orthogonality_error_from_gram,
)
from ncl_lightning.metrics.functional.profile import activation_frequency, summarize_class_counts
from ncl_lightning.metrics.sepin import sepin_on_views

SPACES = ("z", "h")
OPTIONAL_SPACES = ("z_ungated",)
"""Fields measured, beside ``spaces``, whenever the eval steps' output has them (not None)."""
RELEASE_REDUCTIONS: tuple[OrthogonalityReduction, ...] = ("mean_all_entries", "median_all_entries")
"""The NCL release's reductions of ``|G − I|``: its training log's and its ``main_eval.py``'s."""
PAPER_SPARSITY_EPS = 1e-2
"""Threshold on the unnormalised ``|z|`` of the NCL release's ``main_eval.py`` sparsity."""


class FeatureMetricSet(nn.Module):
    """Every metric of docs/metrics.md for one feature space; label metrics need ``C > 0``.

    Args:
        num_features: Feature width ``d``.
        num_classes: Number of classes ``C`` of the labels (0: no labels).
        eps: Activation threshold on ``|ẑ|``.
        top_k: Samples per dimension of the top-k semantic consistency.
        retrieval_k: Neighbours of the retrieval precision.
        retrieval_dims: Dimensions kept (by expected activation) for retrieval; all if None.
    """

    def __init__(
        self,
        num_features: int,
        num_classes: int,
        eps: float = 1e-5,
        top_k: int = 100,
        retrieval_k: int = 10,
        retrieval_dims: int | None = None,
    ) -> None:
        super().__init__()
        self.num_features = num_features
        self.unlabelled = nn.ModuleDict(
            {
                "sparsity": Sparsity(eps),
                "active_dims": ActiveDimensions(num_features, eps),
                "orthogonality_error": OrthogonalityError(num_features, eps),
                "effective_rank": EffectiveRank(num_features),
                "expected_activation": ExpectedActivation(num_features),
            }
        )
        # The releases' variants that need states of their own (the others share ours).
        self.paper = nn.ModuleDict(
            {"sparsity_unnormalized": Sparsity(PAPER_SPARSITY_EPS, normalize=False)}
        )
        labelled: dict[str, Metric] = {}
        if num_classes > 0:
            d, c = num_features, num_classes
            labelled = {
                "semantic_consistency": SemanticConsistency(d, c, eps),
                f"semantic_consistency_top{top_k}": TopKSemanticConsistency(d, c, top_k, eps),
                "semantic_entropy": SemanticEntropy(d, c, eps, "activation"),
                "semantic_entropy_freq": SemanticEntropy(d, c, eps, "frequency"),
                "semantic_entropy_mean_activation": SemanticEntropy(d, c, eps, "mean_activation"),
                f"retrieval_p@{retrieval_k}": RetrievalPrecision(retrieval_k, retrieval_dims),
            }
        self.labelled = nn.ModuleDict(labelled)

    def update(self, z: Tensor, labels: Tensor) -> None:
        """Add a batch: features ``[B, d]`` and labels ``[B]``."""
        for metric in [*self.unlabelled.values(), *self.paper.values()]:
            metric.update(z)
        for metric in self.labelled.values():
            metric.update(z, labels)

    def compute(self) -> dict[str, Tensor]:
        """Loggable scalars, synchronised across ranks (vectors and counts get derived ones)."""
        out: dict[str, Tensor] = {}
        for name, metric in [*self.unlabelled.items(), *self.labelled.items()]:
            if isinstance(metric, EffectiveRank | OrthogonalityError | RetrievalPrecision):
                # One synchronisation of the shared states gives ours and the variants.
                with metric.sync_context():
                    out |= self._shared_state_values(name, metric)
                continue
            value = metric.compute()
            if name == "active_dims":
                active = value.float()
                out |= {
                    "active_dims": active,
                    "dead_dims": self.num_features - active,
                    "activation_rate": active / self.num_features,
                }
            elif name == "expected_activation":  # a [d] vector: log how concentrated it is
                # Share of |EA|: for signed features (CL) the EAs can cancel in a plain sum.
                mass = value.abs().sort(descending=True).values
                out |= {
                    "ea_max": value.max(),
                    "ea_top10_share": mass[:10].sum() / mass.sum().clamp_min(1e-12),
                }
            else:
                out[name] = value.float()
        for name, metric in self.paper.items():
            out[name] = metric.compute().float()
        return out

    def dimensions(self) -> dict[str, Tensor]:
        """Per-dimension vectors ``[d]`` of the states, reduced over the ranks (a collective:
        call it on every rank): ``ea`` (expected activation), ``frequency`` (share of samples
        with ``|ẑ_i| > eps``) and, with labels, ``consistency`` (``100 · max_c n_ic / Σ_c
        n_ic``, NaN for a dimension never activated) and ``majority_class`` (-1 then)."""
        ea, active = self.unlabelled["expected_activation"], self.unlabelled["active_dims"]
        out = {"ea": ea.compute()}  # cached by compute() when it ran: no second reduction
        with ea.sync_context(), active.sync_context():
            frequency = activation_frequency(active.activation_count, ea.num_samples)
        out["frequency"] = frequency.float()
        if "semantic_consistency" in self.labelled:
            metric = self.labelled["semantic_consistency"]
            with metric.sync_context():
                summary = summarize_class_counts(metric.class_counts)
            out["consistency"] = summary.consistency.float()
            out["majority_class"] = summary.majority
        return out

    @staticmethod
    def _shared_state_values(name: str, metric: Metric) -> dict[str, Tensor]:
        """Ours and the releases' variants from one metric's (synchronised) states."""
        if isinstance(metric, EffectiveRank):  # the releases' spectral_entropy: ln(rank)
            rank = effective_rank_from_gram(metric.gram)
            entropy = torch.where(rank > 0, rank.double().log(), 0.0).float()
            return {"effective_rank": rank, "spectral_entropy": entropy}
        if isinstance(metric, OrthogonalityError):  # ours, then the releases' reductions
            active = metric.activation_count > 0
            out = {"orthogonality_error": orthogonality_error_from_gram(metric.gram, active)}
            for r in RELEASE_REDUCTIONS:
                out[f"orthogonality_{r}"] = orthogonality_error_from_gram(metric.gram, active, r)
            return out
        precision = metric.precision  # RetrievalPrecision: one stored copy, both distances
        return {name: precision("cosine"), f"{name}_euclidean": precision("euclidean")}


class FeatureStatistics(EvalStream):
    """Log sparsity, orthogonality, semantic and SEPIN metrics of ``z`` and ``h``.

    Args:
        every_n_epochs: Measure at the validation of every n-th epoch (and the last one).
        spaces: Fields of the eval steps' output to measure: ``z`` (objective features),
            ``h`` (backbone output), and for BayesNCL ``mask`` (the gate itself).
        eps: Activation threshold on ``|ẑ|`` (docs/metrics.md).
        top_k: Samples per dimension of the top-k semantic consistency.
        retrieval_k: Neighbours of the retrieval precision ("mAP@10" of the NCL paper).
        retrieval_dims: Dimensions kept by expected activation for retrieval (NCL paper
            Table 1 keeps 256 of 512); all dimensions if None.
        sepin: Also estimate SEPIN@k of ``z`` on augmented view pairs of the split.
        sepin_max_batches: Cap on the view batches used for SEPIN (None: the whole split,
            or as many batches as `fast_dev_run` / `limit_val_batches` let the trainer read).
        missing: When the eval steps' output lacks one of ``spaces``: ``error`` (a
            ``ConfigError`` naming ``spaces``) or ``skip`` (one notice, then nothing is
            measured: the default instance every self-supervised fit gets, so a subclass
            whose eval steps return nothing still trains).
    """

    def __init__(
        self,
        every_n_epochs: int = 1,
        spaces: list[str] | None = None,
        eps: float = 1e-5,
        top_k: int = 100,
        retrieval_k: int = 10,
        retrieval_dims: int | None = None,
        sepin: bool = True,
        sepin_max_batches: int | None = None,
        missing: Literal["error", "skip"] = "error",
    ) -> None:
        super().__init__()
        spaces = list(SPACES) if spaces is None else spaces
        check_choice("missing", missing, ("error", "skip"))
        check_int("every_n_epochs", every_n_epochs)
        check_spaces(spaces)
        for name, value in (("top_k", top_k), ("retrieval_k", retrieval_k),
                            ("retrieval_dims", retrieval_dims), ("sepin_max_batches", sepin_max_batches)):  # fmt: skip  # noqa: E501
            if value is not None:
                check_int(name, value)
        check_at_least("eps", eps, 0)
        self.every_n_epochs = every_n_epochs
        self.spaces = spaces
        self.eps = eps
        self.top_k = top_k
        self.retrieval_k = retrieval_k
        self.retrieval_dims = retrieval_dims
        self.sepin = sepin
        self.sepin_max_batches = sepin_max_batches
        self.missing = missing
        self._skipped = False  # missing: skip, and the outputs lacked a space
        self._said_no_classes = False  # the no-num_classes notice was given
        self.dimensions: dict[str, dict[str, Tensor]] = {}
        """``stage -> {name: [d]}``: the per-dimension vectors of ``z`` of the stage's last
        measurement ([`FeatureMetricSet.dimensions`][], plus ``sepin`` when measured), the
        same on every rank; loggers with a ``log_dimensions`` method (W&B) get them as a
        table at the end of ``fit`` and ``test``."""

    def _start(self, stage: str, active: bool) -> None:
        if stage == "test":
            self.dimensions.pop("test", None)
        super()._start(stage, active and not self._skipped)

    def _update(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any
    ) -> None:
        strict = self.missing == "error"
        if missing_spaces("FeatureStatistics", self.spaces, pl_module, outputs, strict):
            self._skipped, self._active = True, False
            rank_zero_info(
                f"FeatureStatistics: {type(pl_module).__name__}'s eval steps return no "
                f"{self.spaces}; the default feature statistics are off for this run"
            )
            return
        optional = [s for s in OPTIONAL_SPACES if s not in self.spaces]
        present = [s for s in optional if getattr(outputs, s, None) is not None]
        for space in [*self.spaces, *present]:
            features = getattr(outputs, space).detach().float()
            if space not in self._metrics:
                self._metrics[space] = FeatureMetricSet(
                    features.shape[1], self._num_classes(trainer), self.eps, self.top_k,
                    self.retrieval_k, self.retrieval_dims,
                ).to(features.device)  # fmt: skip
            self._metrics[space].update(features, batch[1])

    def _num_classes(self, trainer: L.Trainer) -> int:
        datamodule = trainer.datamodule
        num_classes = datamodule.num_classes if isinstance(datamodule, ClassLabels) else 0
        if not num_classes and not self._said_no_classes:
            # A notice, said once: unlabelled data (sparse coding, dSprites) is a normal
            # input, and FeatureStatistics is a default component of every SSL fit.
            self._said_no_classes = True
            rank_zero_info(
                "FeatureStatistics: the data has no num_classes; "
                "semantic and retrieval metrics are skipped"
            )
        return int(num_classes)

    def _log(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        # compute() already reduced the states over the ranks: the values are global and
        # the same on every rank, so sync_dist=True averages equal numbers (module docstring).
        for space, metrics in self._metrics.items():
            for key, value in metrics.compute().items():
                pl_module.log(f"{stage}/{space}/{key}", value, sync_dist=True)
        if "z" in self._metrics:
            self.dimensions[stage] = self._metrics["z"].dimensions()
        if self.sepin and "z" in self._metrics:
            values = self._sepin(trainer, pl_module, stage)
            self.dimensions[stage]["sepin"] = values.pop("per_dimension")
            for key, value in values.items():
                pl_module.log(f"{stage}/z/{key}", value, sync_dist=True)

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.dimensions.pop("val", None)  # this fit's table only

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._log_dimensions(trainer, "val")

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._log_dimensions(trainer, "test")

    def _log_dimensions(self, trainer: L.Trainer, stage: str) -> None:
        """Rank 0 hands the stage's per-dimension vectors of ``z`` (and the top-activation
        rows a ``TopActivations`` of ``z`` drew at that stage) to loggers that take them."""
        values = self.dimensions.get(stage)
        if values is None or not trainer.is_global_zero:
            return
        rows: dict[int, Any] = {}
        for callback in trainer.callbacks:  # type: ignore[attr-defined]
            if isinstance(callback, TopActivations) and callback.space == "z":
                rows |= callback.last_rows.get(stage, {})
        columns = {name: vector.tolist() for name, vector in values.items()}
        for logger in trainer.loggers:
            if hasattr(logger, "log_dimensions"):
                logger.log_dimensions(f"{stage}/z/dimensions", columns, rows, trainer.global_step)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Refuse SEPIN without view pairs or a temperature before the first step."""
        if self.sepin and "z" in self.spaces:
            self._sepin_inputs(trainer, pl_module)

    @staticmethod
    def _sepin_inputs(trainer: L.Trainer, pl_module: L.LightningModule) -> tuple[ViewData, float]:
        """The DataModule's view pairs and the method's temperature, or a ``ConfigError``."""
        datamodule = require_extra(
            trainer.datamodule, ViewData, "FeatureStatistics(sepin=True)", "view_dataloader()",
            "sepin", "set sepin: false",
        )  # fmt: skip
        temperature = getattr(pl_module.hparams, "temperature", None)
        if temperature is None:
            raise ConfigError(
                "SEPIN uses the training temperature: the method has no `temperature`",
                key="sepin",
            )
        return datamodule, temperature

    @torch.no_grad()
    def _sepin(
        self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str
    ) -> dict[str, Tensor]:
        datamodule, temperature = self._sepin_inputs(trainer, pl_module)
        loader = datamodule.view_dataloader(stage, trainer.global_rank, trainer.world_size)
        limits = [self.sepin_max_batches, batch_limit(trainer, stage, loader)]
        most = min((n for n in limits if n is not None), default=None)
        d = self._metrics["z"].num_features
        return sepin_on_views(pl_module, loader, temperature, d, most, per_dimension=True)


def default_feature_statistics() -> FeatureStatistics:
    """The feature statistics of a self-supervised fit whose config lists none: those of
    ``z`` (sparsity, active dimensions, orthogonality, semantic consistency and entropy,
    retrieval) at every validation and test; no SEPIN (it encodes the split again), no
    ``h``. A configured ``FeatureStatistics`` replaces it."""
    return FeatureStatistics(every_n_epochs=1, spaces=["z"], sepin=False, missing="skip")
