"""``Disentanglement``: MIG of the learned features against ground-truth factors.

For data with known generative factors (dSprites: shape, scale, orientation, posX, posY),
the callback streams the features that the method's ``validation_step`` / ``test_step``
return ([`Encoded`][ncl_lightning.methods.ssl.Encoded]: ``z`` after the non-negative map,
``h`` the backbone output) together with the batch's integer factor labels ``[B, K]``,
and at the end of the epoch logs the Mutual Information Gap (Chen et al., NeurIPS 2018;
disentanglement_lib estimator with 20 equal-width bins) of each space:

* ``{stage}/{space}/mig``: the mean normalised gap over factors (NCL paper, Wang et al.,
  ICLR 2024, Table 6 reports it on dSprites: CL 0.037, NCL 0.065);
* ``{stage}/{space}/mig/{factor}``: the normalised gap of each factor, named by the
  DataModule's ``factor_names`` when it has them (``factor0``, ... otherwise).

The codes are kept (list states reduced by "cat"), because the bins span each dimension's
global min and max; every rank therefore computes, and logs, the same value as one process
would on all samples (``sync_dist=True`` averages equal numbers: no Lightning warning).
"""

from __future__ import annotations

from typing import Any

import lightning as L
from torch import Tensor
from torchmetrics.utilities import dim_zero_cat

from ncl_lightning.callbacks.schedule import EvalStream, check_spaces, missing_spaces
from ncl_lightning.foundation.errors import DataError
from ncl_lightning.foundation.protocols import FactorData
from ncl_lightning.foundation.validation import check_int
from ncl_lightning.metrics.functional.mig import mutual_information_gap_per_factor
from ncl_lightning.metrics.mig import MutualInformationGap


class _PerFactorMIG(MutualInformationGap):
    """[`MutualInformationGap`][] whose ``compute`` returns the per-factor gaps ``[K]``."""

    def compute(self) -> Tensor:
        """float64 ``[K]`` gaps over every stored sample (all ranks, after the sync); the
        callback computes only a metric it has fed."""
        codes, factors = dim_zero_cat(self.codes), dim_zero_cat(self.factors)
        return mutual_information_gap_per_factor(codes, factors, self.num_bins)


def _factor_labels(batch: Any) -> Tensor:
    """The integer factor labels ``[B, K]`` of an eval batch ``(images, factors)``."""
    factors = batch[1] if isinstance(batch, list | tuple) and len(batch) > 1 else None
    if isinstance(factors, Tensor) and factors.ndim == 2 and not factors.is_floating_point():
        return factors
    got = f"{factors.dtype} {tuple(factors.shape)}" if isinstance(factors, Tensor) else "none"
    raise DataError(f"Disentanglement needs integer factor labels [B, K] as batch[1], got {got}")


class Disentanglement(EvalStream):
    """Log the MIG of ``z`` and ``h`` (and per factor) at validation and test.

    Args:
        spaces: Fields of the eval steps' output to measure (``z``, ``h``; ``mask`` for
            BayesNCL's gate).
        num_bins: Equal-width bins per code dimension (disentanglement_lib: 20).
        max_samples: Samples kept per evaluation, split evenly over ranks (the first
            ones of each rank's shard); None keeps the whole split.
        every_n_epochs: Measure at the validation of every n-th epoch (and the last one);
            tests are always measured.
        per_factor: Also log the gap of each factor.
    """

    def __init__(
        self,
        spaces: list[str] | None = None,
        num_bins: int = 20,
        max_samples: int | None = None,
        every_n_epochs: int = 1,
        per_factor: bool = True,
    ) -> None:
        super().__init__()
        spaces = ["z", "h"] if spaces is None else list(spaces)
        check_spaces(spaces)
        check_int("num_bins", num_bins)
        if max_samples is not None:
            check_int("max_samples", max_samples)
        check_int("every_n_epochs", every_n_epochs)
        self.spaces = spaces
        self.num_bins = num_bins
        self.max_samples = max_samples
        self.every_n_epochs = every_n_epochs
        self.per_factor = per_factor
        self._seen = 0

    def _start(self, stage: str, active: bool) -> None:
        super()._start(stage, active)
        self._seen = 0

    def _update(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any
    ) -> None:
        factors = _factor_labels(batch)
        missing_spaces("Disentanglement", self.spaces, pl_module, outputs)
        keep = len(factors)
        if self.max_samples is not None:
            per_rank = -(-self.max_samples // trainer.world_size)
            keep = min(keep, per_rank - self._seen)
            if keep <= 0:
                return
        self._seen += keep
        for space in self.spaces:
            codes = getattr(outputs, space).detach().float()
            if space not in self._metrics:
                self._metrics[space] = _PerFactorMIG(self.num_bins).to(codes.device)
            self._metrics[space].update(codes.flatten(1)[:keep], factors[:keep])

    def _log(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        for space, metric in self._metrics.items():
            gaps = metric.compute().float()  # [K], synchronised: equal on every rank
            pl_module.log(f"{stage}/{space}/mig", gaps.nanmean(), sync_dist=True)
            if self.per_factor:
                for name, gap in zip(self._factor_names(trainer, len(gaps)), gaps, strict=True):
                    if not gap.isnan():  # the same factors are NaN on every rank
                        pl_module.log(f"{stage}/{space}/mig/{name}", gap, sync_dist=True)

    @staticmethod
    def _factor_names(trainer: L.Trainer, num_factors: int) -> list[str]:
        datamodule = trainer.datamodule
        names = datamodule.factor_names if isinstance(datamodule, FactorData) else None
        if names is None or len(names) != num_factors:
            return [f"factor{k}" for k in range(num_factors)]
        return [str(n) for n in names]
