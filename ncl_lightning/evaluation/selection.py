"""Feature selection by expected activation (NCL paper, Table 1 and Figure 10).

NCL features are sparse and each dimension is used by a few semantic clusters, so the
dimensions with the largest expected activation ``EA_i = mean_x ẑ_i(x)`` on the training
set carry most of the information: keeping the top-k of them loses little accuracy,
while for dense CL features the ranking means little (Wang et al., ICLR 2024, Sec. 5.1).

For every ``k`` in ``ks`` and every rule in ``rules`` (``RULES``), this module reports
on the selected dims of the features of ``space``:

* ``linear_acc``: a linear probe trained on the training features, tested on the test split;
* ``retrieval_p@10``: cosine retrieval precision@10 on the test split ("mAP@10"; with
  ``retrieval_distance: euclidean`` the release's variant, ``retrieval_p@10_euclidean``);
* ``transfer_acc``: a linear probe on another labelled dataset (``transfer``; Table 1 trains
  it on Stylized ImageNet-100, App. G.4).

The spaces (what is probed): ``z``, the method's features (after NCL's non-negative map
and BayesNCL's gate; ours); ``p``, the raw projector output before the map (the NCL
release's ``main_linear.py`` with ``selected_dims``: it probes ``projector(backbone(x))``);
``h``, the encoder output.

The rules (``RULES``) rank the dims by the EA of one tensor, computed on the training split.
Write ``q`` for the pre-map features: the projector output ``p`` for ``space: z`` or ``p``
(``z = ReLU(p)`` for NCL), the features themselves for ``space: h``.

* ``ea``: EA of the probed features themselves (ours: ``z`` for ``space: z``);
* ``ea_no_relu``: EA of ``q`` (NCL paper Table 1, "EA w/o ReLU");
* ``ea_relu``: EA of ``ReLU(q)``, the rule of the NCL release for CL and NCL alike
  (``solo/methods/linear.py``, ``training_epoch_end``: ``relu``, ``normalize``, sum over
  samples, sort) and Table 1's "EA w/ ReLU";
* ``random``: a seeded random k (the baseline).

Which rules coincide: on CL's ``z`` (``z = p``) ``ea`` = ``ea_no_relu``; on NCL's ``z``
with a ReLU map ``ea`` = ``ea_relu``; on ``p`` ``ea`` = ``ea_no_relu``. For CL, Table 1's two
EA rows are therefore ``ea_no_relu`` and ``ea_relu``, both on ``space: p``.

Run with ``ncl-cli test``. Keys: ``test/selection/{rule}/k{k}/{metric}``; files in the run
folder: ``feature_selection.json``, ``feature_selection.md``, ``accuracy_vs_k.png``.
"""

from __future__ import annotations

import json
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor

from ncl_lightning.callbacks.schedule import run_dir
from ncl_lightning.checkpoints.load import load_method
from ncl_lightning.data.base import MultiViewDataModule
from ncl_lightning.evaluation.features import extract_features, probe_accuracy
from ncl_lightning.evaluation.linear import SPACES, Space, encode_space, z_width
from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.protocols import CleanData, require_extra
from ncl_lightning.foundation.validation import (
    check_at_least,
    check_choice,
    check_int,
    check_positive,
    check_range,
)
from ncl_lightning.methods.classifier import first_view
from ncl_lightning.methods.record import write_record
from ncl_lightning.metrics.functional import (
    RETRIEVAL_DISTANCES,
    RetrievalDistance,
    expected_activation,
    retrieval_precision,
    select_by_expected_activation,
)
from ncl_lightning.nn.gather import gather_uneven
from ncl_lightning.plot.pictures import accuracy_vs_k

RULES = ("ea", "ea_no_relu", "ea_relu", "random")
"""Selection rules by name: EA of the probed features, of the pre-map features ``q``, of
``ReLU(q)`` (the NCL release), random."""

PRE_MAP_RULES = ("ea_no_relu", "ea_relu")
"""The rules that rank the pre-map features ``q`` rather than the probed ones."""

DEFAULT_RULES = ("ea", "random")
"""The rules [`FeatureSelection`][ncl_lightning.evaluation.FeatureSelection] runs unless
``rules`` says otherwise (each rule adds a linear probe per ``k``)."""


def default_ks(d: int) -> list[int]:
    """Powers of two from 8 up to ``d``, and ``d`` itself."""
    ks = [2**i for i in range(3, d.bit_length()) if 2**i < d]
    return [*ks, d]


def rule_activations(features: Tensor, pre_map: Tensor, rule: str) -> Tensor:
    """Expected activations ``[d]`` that ``rule`` ranks: of ``features`` ``[N, d]`` (``ea``,
    ``random``), of the pre-map features ``pre_map`` ``[N, d]`` (``ea_no_relu``) or of
    ``ReLU(pre_map)`` (``ea_relu``); each row is L2-normalised first."""
    check_choice("rule", rule, RULES)
    if rule == "ea_relu":
        return expected_activation(torch.relu(pre_map))
    return expected_activation(pre_map if rule == "ea_no_relu" else features)


def select_dims(ea: Tensor, k: int, rule: str, seed: int) -> Tensor:
    """Indices ``[k]`` of the kept dims under ``rule``: the top-k of the expected
    activations ``ea`` ``[d]`` ([`rule_activations`][] of the rule), or for ``random`` k of
    the ``d`` dims, seeded by ``seed``."""
    check_choice("rule", rule, RULES)
    if rule != "random":
        return select_by_expected_activation(ea, k)
    gen = torch.Generator().manual_seed(seed)
    return torch.randperm(ea.shape[0], generator=gen)[:k].to(ea.device)


class FeatureSelection(L.LightningModule):
    """Expected-activation feature selection of a pretrained method's features.

    Args:
        checkpoint: Pretrained CL/NCL/BayesNCL checkpoint (the whole method is rebuilt).
        num_classes: Classes of the evaluated data (CLI-linked).
        batch_size: Unused (CLI-linked).
        ks: Numbers of kept dims to sweep (default: powers of two up to ``d``, and ``d``).
        space: Features to select from and probe: ``z`` (the method's features, after the
            non-negative map and gate; ours), ``p`` (the raw projector output, the NCL
            release's ``main_linear.py``) or ``h`` (encoder).
        rules: Selection rules to compare (names of ``RULES``; default ``ea`` and
            ``random``). NCL Table 1's rows: "EA w/o ReLU" is ``ea_no_relu``, "EA w/ ReLU"
            ``ea_relu`` (the release's rule); with ``space: p`` for the release's probe.
        seed: Seed of the random-k baseline.
        probe_epochs: Epochs of each linear probe on fixed features.
        probe_lr: Peak learning rate of those probes.
        retrieval_k: Neighbours of the retrieval precision.
        retrieval_distance: ``cosine`` (App. G.4's "largest cosine similarity": the kept
            dims re-normalised) or ``euclidean`` (the NCL release's ``main_eval.py``: rows
            normalised over all dims, the kept dims not re-normalised); the key gets
            ``_euclidean`` appended for the second
            ([`retrieval_precision`][ncl_lightning.metrics.functional.retrieval_precision]).
        transfer: A labelled DataModule (train/val splits) for the transfer probe (Table 1:
            Stylized ImageNet-100, an ``ImageNet100DataModule`` on its ``train``/``val``
            folders).
    """

    def __init__(
        self,
        checkpoint: str,
        num_classes: int = 0,
        batch_size: int | None = None,
        ks: list[int] | None = None,
        space: Space = "z",
        rules: list[str] | None = None,
        seed: int = 0,
        probe_epochs: int = 100,
        probe_lr: float = 0.1,
        retrieval_k: int = 10,
        retrieval_distance: RetrievalDistance = "cosine",
        transfer: MultiViewDataModule | None = None,
    ) -> None:
        super().__init__()
        check_at_least("num_classes", num_classes, 1)
        check_choice("space", space, SPACES)
        check_rules(rules)
        check_at_least("probe_epochs", probe_epochs, 1)
        check_positive("probe_lr", probe_lr)
        check_at_least("retrieval_k", retrieval_k, 1)
        check_choice("retrieval_distance", retrieval_distance, RETRIEVAL_DISTANCES)
        self.save_hyperparameters(ignore=["transfer"])
        self.method = load_method(checkpoint).requires_grad_(False)
        # Check ks against the feature width now, before any image is encoded.
        if space == "h":
            width = self.method.backbone.out_dim
        else:
            width = z_width(self.method, checkpoint, space)
        if ks is not None:
            check_ks(ks, width)
        self.transfer = transfer
        self._train: tuple[Tensor, Tensor] | None = None
        self._eas: dict[str, Tensor] = {}  # rule -> the EA [d] it ranks (training split)
        self._test: list[tuple[Tensor, Tensor]] = []
        self.results: dict[str, dict[int, dict[str, float]]] = {}

    def backbone_spec(self) -> dict[str, Any] | None:
        return self.method.backbone_spec()

    @property
    def rules(self) -> tuple[str, ...]:
        """The rules this run compares."""
        return tuple(self.hparams.get("rules") or DEFAULT_RULES)

    @property
    def pre_map_differs(self) -> bool:
        """Whether the pre-map features ``q`` are not the probed ones (``space: z``)."""
        return self.hparams.space == "z"

    def encode(self, x: Tensor) -> Tensor:
        """The selected space's features ``[B, d]`` of images ``[B, C, H, W]``."""
        return encode_space(self.method, x, self.hparams.space).z

    def encode_with_pre_map(self, x: Tensor) -> Tensor:
        """``[x, q]`` ``[B, 2d]`` for ``space: z``: the method's features ``z`` and the
        projector output ``q = p`` before the non-negative map (and gate)."""
        encoded = self.method.encode(x)
        return torch.cat([encoded.z, self.method.projector(encoded.h)], dim=1)

    def _clean(self, dm: object, split: str, pre_map: bool = False) -> tuple[Tensor, Tensor]:
        dm = require_extra(dm, CleanData, "FeatureSelection", "clean_dataloader()", "data")
        loader = dm.clean_dataloader(split, self.global_rank, self.trainer.world_size)
        encode = self.encode_with_pre_map if pre_map else self.encode
        return extract_features(encode, loader, self.device)

    def on_test_start(self) -> None:
        needs_pre_map = self.pre_map_differs and any(r in PRE_MAP_RULES for r in self.rules)
        if needs_pre_map:  # one pass of the encoder for both
            both, y = self._clean(self.trainer.datamodule, "train", pre_map=True)
            x, pre_map = both.chunk(2, dim=1)
        else:  # space p or h (the probed features are q), or no rule ranks q
            x, y = self._clean(self.trainer.datamodule, "train")
            pre_map = x
        self._train = (x, y)
        self._eas = {rule: rule_activations(x, pre_map, rule) for rule in self.rules}
        self._test = []

    def test_step(self, batch: Any, batch_idx: int) -> None:
        x, y = first_view(batch)
        self._test.append((self.encode(x).float(), y))

    def on_test_epoch_end(self) -> None:
        test = (
            gather_uneven(torch.cat([z for z, _ in self._test])),
            gather_uneven(torch.cat([y for _, y in self._test])),
        )
        transfer = None
        if self.transfer is not None:
            transfer = (self._clean(self.transfer, "train"), self._clean(self.transfer, "val"))
        d = self._train[0].shape[1]
        ks = self.hparams.ks or default_ks(d)
        fit = {"epochs": self.hparams.probe_epochs, "lr": self.hparams.probe_lr}
        self.results = {rule: {} for rule in self.rules}
        for rule in self.rules:
            for k in ks:
                dims = select_dims(self._eas[rule], k, rule, self.hparams.seed)
                row = self.evaluate_dims(dims, test, transfer, fit)
                self.results[rule][k] = row
                for name, value in row.items():
                    # every rank evaluated the same gathered features: the mean over ranks
                    # is the value itself (one all-reduce per key, once per test)
                    self.log(f"test/selection/{rule}/k{k}/{name}", value, sync_dist=True)
        self._write()

    def evaluate_dims(
        self,
        dims: Tensor,
        test: tuple[Tensor, Tensor],
        transfer: tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]] | None,
        fit: dict[str, Any],
    ) -> dict[str, float]:
        """Linear accuracy, retrieval precision and transfer accuracy on ``dims``."""
        train_x, train_y = self._train
        distance = self.hparams.retrieval_distance
        suffix = "" if distance == "cosine" else f"_{distance}"
        row = {
            "linear_acc": probe_accuracy(
                (train_x[:, dims], train_y), (test[0][:, dims], test[1]),
                self.hparams.num_classes, **fit,
            ),
            f"retrieval_p@{self.hparams.retrieval_k}{suffix}": retrieval_precision(
                test[0], test[1], k=self.hparams.retrieval_k, dims=dims, distance=distance
            ).item(),
        }  # fmt: skip
        if transfer is not None:
            (tx, ty), (vx, vy) = transfer
            row["transfer_acc"] = probe_accuracy(
                (tx[:, dims], ty), (vx[:, dims], vy), self.transfer.num_classes, **fit
            )
        return row

    def _write(self) -> None:
        folder = run_dir(self.trainer)
        if not self.trainer.is_global_zero:
            return
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "feature_selection.json").write_text(json.dumps(self.results, indent=2))
        table = selection_table(self.results)
        (folder / "feature_selection.md").write_text(table + "\n")
        curves = {
            f"{rule} top-k": (list(rows), [r["linear_acc"] for r in rows.values()])
            for rule, rows in self.results.items()
        }
        accuracy_vs_k(curves, folder / "accuracy_vs_k.png", "Linear accuracy vs selected dims")
        rank_zero_info(f"Feature selection ({folder}):\n{table}")

    def configure_optimizers(self) -> None:
        return None

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """The checkpoint record ([`write_record`][ncl_lightning.methods.record.write_record])."""
        write_record(self, checkpoint)


def selection_table(results: dict[str, dict[int, dict[str, float]]]) -> str:
    """Markdown table: one row per (rule, k), one column per metric (percent)."""
    metrics = sorted({m for rows in results.values() for row in rows.values() for m in row})
    lines = ["| rule | k | " + " | ".join(metrics) + " |", "|---|---|" + "---|" * len(metrics)]
    for rule, rows in results.items():
        for k, row in rows.items():
            cells = " | ".join(f"{100 * row[m]:.2f}" if m in row else "" for m in metrics)
            lines.append(f"| {rule} | {k} | {cells} |")
    return "\n".join(lines)


def check_rules(rules: list[str] | None) -> None:
    """``rules`` is ``None`` (the default rules) or a non-empty list of distinct
    ``RULES`` names."""
    if rules is None:
        return
    if not rules or len(set(rules)) != len(rules):
        raise ConfigError(
            f"rules must list distinct rules of {list(RULES)}, got {rules}", key="rules"
        )
    for rule in rules:
        check_choice("rules", rule, RULES)


def check_ks(ks: list[int], width: int) -> None:
    """``ks`` is a non-empty list of integers in ``[1, width]`` (the features' width)."""
    if not ks:
        raise ConfigError("ks must list at least one k, got []", key="ks")
    for k in ks:
        check_int("ks", k, 1)
        check_range("ks", k, 1, width)
