"""Callbacks of the sparse-coding study (Pokle et al., AISTATS 2022).

They work with any method whose ``backbone`` exposes ``dictionary_weight`` (the
``[m, p]`` first-layer weight of [`SparseCodingEncoder`][ncl_lightning.nn.SparseCodingEncoder]) and
any DataModule exposing the ground-truth ``dictionary`` ``[p, d]``
([`SparseCodingDataModule`][ncl_lightning.data.SparseCodingDataModule]):

* [`WarmStart`][] initialises the encoder at the dictionary plus noise;
* [`EncoderNormalization`][] renormalises the rows or columns of ``W`` after every step;
* [`DictionaryRecoveryMonitor`][] logs the max / median / min over atoms of the best
  absolute cosine with any encoder row (``ncl_lightning.metrics.DictionaryRecovery``).
"""

from __future__ import annotations

from typing import Any, Literal

import lightning as L
import torch
from torch import Tensor

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.protocols import GroundTruthDictionary, require_extra
from ncl_lightning.foundation.validation import check_at_least, check_choice, check_int
from ncl_lightning.metrics import DictionaryRecovery
from ncl_lightning.nn.sparse_coding import normalize_weight_, warm_start_


def encoder_weight(pl_module: L.LightningModule, owner: str) -> Tensor:
    """The ``dictionary_weight`` ``[m, p]`` of ``pl_module.backbone``; one-line
    [`ConfigError`][] if it has none."""
    backbone = getattr(pl_module, "backbone", None)
    weight = getattr(backbone, "dictionary_weight", None)
    if not isinstance(weight, Tensor):
        raise ConfigError(
            f"{owner} needs a backbone exposing `dictionary_weight` (e.g. "
            f"ncl_lightning.nn.SparseCodingEncoder), got {type(backbone).__name__}",
            key="model.init_args.backbone",
        )
    return weight


def ground_truth_dictionary(trainer: L.Trainer, owner: str) -> Tensor:
    """The DataModule's ground-truth ``dictionary`` ``[p, d]``
    ([`GroundTruthDictionary`][ncl_lightning.foundation.protocols.GroundTruthDictionary]); one-line
    [`ConfigError`][] if it has none."""
    what = "the ground-truth `dictionary` (e.g. ncl_lightning.data.SparseCodingDataModule)"
    return require_extra(trainer.datamodule, GroundTruthDictionary, owner, what, "data").dictionary


WARM_START_C = 1.0
"""Pokle et al. (2022), Sec. 5.2.2, Figs. 4-6: the warm start's noise exponent ``c``
(``N(0, p^{-c} I)``, std ``σ = 1/√p ≈ 0.141`` at ``p = 50``)."""


class WarmStart(L.Callback):
    """Start the encoder near the ground truth: ``W_i = M_{j_i} + N(0, p^{-c} I)``.

    Pokle et al. (2022, Sec. 5.2.2) report that from such a start (``c = 1``) their
    non-contrastive loss without a predictor still fails (Fig. 4), with a linear predictor
    recovers the dictionary (Fig. 5), and that the predictor alone, from a random start,
    fails (Fig. 6); with ``c = 2`` and encoder rows renormalised after every step
    ([`EncoderNormalization`][]) it recovers without a predictor (Fig. 7). The weights are
    written in ``setup("fit")``, i.e. *before* Lightning restores a checkpoint, so resuming
    a run keeps its trained weights. Methods with a momentum target (``reset_target()``,
    e.g. BYOL) get their target re-synchronised.

    Args:
        c: Noise exponent ``c`` (std ``σ = 1 / p^{c/2}``; >= 0). The default 1 is the warm
            start of Pokle et al.'s Figs. 4-6 (``σ ≈ 0.141`` at ``p = 50``); their Fig. 7
            uses 2 (``σ = 1/p = 0.02``). The release's ``gen_Winit``
            (``data_model/gen_sparse_coding_data.py``) draws the same ``N(0, p^{-c} I)``
            at its HEAD (commit ``b40ed17``, "reverted to previous warm start logic":
            ``1.0/p**(c/2)``); only its first commit (``e8fe120``) used the level ``c``
            as the std itself. Its configs sweep ``ws_noise_levels`` such as
            ``(2, 1.5, 1.25, 1)`` (``config/overpara_pre_ws_alter.yaml``). Larger ``c``
            starts nearer the atoms.
        seed: Seed of the atom assignment and the noise.
    """

    def __init__(self, c: float = WARM_START_C, seed: int = 0) -> None:
        check_at_least("c", c, 0)
        self.c = c
        self.seed = seed
        self.atoms: Tensor | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        weight = encoder_weight(pl_module, "WarmStart")
        dictionary = ground_truth_dictionary(trainer, "WarmStart")
        generator = torch.Generator().manual_seed(self.seed)
        self.atoms = warm_start_(weight, dictionary, self.c, generator)
        reset_target = getattr(pl_module, "reset_target", None)
        if callable(reset_target):
            reset_target()


class EncoderNormalization(L.Callback):
    """Project ``W`` to unit-norm rows or columns after every training batch.

    Pokle et al. (2022) normalise the encoder after each SGD step; with ``"rows"`` every
    neuron's filter has unit norm, with ``"columns"`` every input coordinate's weights.

    Args:
        mode: ``"rows"`` or ``"columns"``.
    """

    def __init__(self, mode: Literal["rows", "columns"] = "rows") -> None:
        check_choice("mode", mode, ("rows", "columns"))
        self.mode = mode

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        encoder_weight(pl_module, "EncoderNormalization")  # fail before training starts

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        normalize_weight_(encoder_weight(pl_module, "EncoderNormalization"), self.mode)


class DictionaryRecoveryMonitor(L.Callback):
    """Log dictionary recovery of the encoder during training and at validation.

    Logs ``train/dictionary/{max,median,min}`` every ``every_n_steps`` optimiser steps and
    ``val/dictionary/{max,median,min}`` at the end of every validation epoch (the metric
    describes the weights, so every rank logs the same value).

    Args:
        every_n_steps: Training-step logging period (>= 1).
    """

    def __init__(self, every_n_steps: int = 10) -> None:
        check_int("every_n_steps", every_n_steps)
        self.every_n_steps = every_n_steps
        self.metric: DictionaryRecovery | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        encoder_weight(pl_module, "DictionaryRecoveryMonitor")
        dictionary = ground_truth_dictionary(trainer, "DictionaryRecoveryMonitor")
        self.metric = DictionaryRecovery(dictionary, sync_on_compute=False)

    def _log(self, pl_module: L.LightningModule, stage: str) -> None:
        assert self.metric is not None
        scores = self.metric(encoder_weight(pl_module, "DictionaryRecoveryMonitor"))
        # DDP keeps the weights equal on every rank, so the scores are too. A training
        # step's value is logged as it is (no warning on step); the validation value is
        # logged on epoch, where sync_dist=True averages equal numbers (one all-reduce
        # per key and validation) instead of warning.
        when = {"on_step": True, "on_epoch": False} if stage == "train" else {"sync_dist": True}
        for name, value in scores.items():
            pl_module.log(f"{stage}/dictionary/{name}", value, **when)

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if trainer.global_step % self.every_n_steps == 0:
            self._log(pl_module, "train")

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._log(pl_module, "val")
