"""Warm start, encoder normalisation and dictionary-recovery logging on sparse-coding data."""

from __future__ import annotations

import math
from pathlib import Path

import lightning as L
import pytest
import torch
import yaml

from ncl_lightning.callbacks import DictionaryRecoveryMonitor, EncoderNormalization, WarmStart
from ncl_lightning.data import DigitsDataModule, SparseCodingDataModule
from ncl_lightning.methods import BYOL, CL, SimSiam
from ncl_lightning.metrics.functional.dictionary import dictionary_recovery
from ncl_lightning.nn import SmallCNN, SparseCodingEncoder
from tests.conftest import ROOT


def _data() -> SparseCodingDataModule:
    return SparseCodingDataModule(n=64, p=12, d=4, batch_size=16, val_n=32, seed=3)


def _simsiam(**kw) -> SimSiam:
    return SimSiam(
        SparseCodingEncoder(12, 8, bias_init=0.1),
        proj_num_layers=0,
        pred_num_layers=1,
        optimizer=lambda params: torch.optim.Adam(params, lr=0.01),
        scale_lr=False,
        warmup_epochs=0,
        **kw,
    )


def _trainer(tmp_path: Path, callbacks: list, **kw) -> L.Trainer:
    kw.setdefault("max_epochs", 1)
    kw.setdefault("logger", False)
    kw.setdefault("enable_checkpointing", False)
    return L.Trainer(
        accelerator="cpu",
        devices=1,
        default_root_dir=tmp_path,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=callbacks,
        **kw,
    )


class _WeightAtTrainStart(L.Callback):
    def on_train_start(self, trainer, pl_module) -> None:
        self.weight = pl_module.backbone.dictionary_weight.detach().clone()


def test_warm_start_places_rows_near_the_atoms(tmp_path: Path) -> None:
    data = _data()
    seen = _WeightAtTrainStart()
    model = _simsiam()
    before = dictionary_recovery(model.backbone.dictionary_weight, data.dictionary)["min"]
    _trainer(tmp_path, [WarmStart(c=8.0, seed=1), seen], max_steps=1).fit(model, data)
    assert dictionary_recovery(seen.weight, data.dictionary)["min"] > 0.999 > before


def test_warm_start_is_seeded_and_resyncs_a_byol_target(tmp_path: Path) -> None:
    data = _data()
    weights = []
    for _ in range(2):
        model = BYOL(SparseCodingEncoder(12, 8), proj_num_layers=0, pred_num_layers=1)
        callback = WarmStart(c=1.0, seed=5)
        trainer = _trainer(tmp_path, [callback])
        trainer.datamodule = data  # what fit() sets before the setup hooks
        callback.setup(trainer, model, "fit")
        weights.append(model.backbone.dictionary_weight.detach().clone())
        assert torch.equal(model.target_backbone.linear.weight, model.backbone.linear.weight)
    assert torch.equal(weights[0], weights[1])
    callback.setup(trainer, model, "test")  # only "fit" initialises
    assert torch.equal(model.backbone.dictionary_weight, weights[1])


def test_resuming_keeps_the_trained_weights_not_the_warm_start(tmp_path: Path) -> None:
    data = _data()
    trainer = _trainer(tmp_path, [WarmStart(c=1.0)], max_epochs=1)
    model = _simsiam()
    trainer.fit(model, data)
    ckpt = tmp_path / "one.ckpt"
    trainer.save_checkpoint(ckpt)
    trained = model.backbone.dictionary_weight.detach().clone()
    seen = _WeightAtTrainStart()
    resumed = _simsiam()
    _trainer(tmp_path, [WarmStart(c=1.0), seen], max_epochs=2).fit(resumed, data, ckpt_path=ckpt)
    assert torch.equal(seen.weight, trained)


@pytest.mark.parametrize(("mode", "dim"), [("rows", 1), ("columns", 0)])
def test_normalisation_after_every_step(tmp_path: Path, mode: str, dim: int) -> None:
    model = _simsiam()
    _trainer(tmp_path, [EncoderNormalization(mode)], max_steps=3).fit(model, _data())  # type: ignore[arg-type]
    norms = model.backbone.dictionary_weight.detach().norm(dim=dim)
    assert torch.allclose(norms, torch.ones_like(norms), atol=1e-5)


def test_monitor_logs_train_and_val_recovery(tmp_path: Path) -> None:
    data = _data()
    model = _simsiam()
    trainer = _trainer(tmp_path, [DictionaryRecoveryMonitor(every_n_steps=1)], max_epochs=1)
    trainer.fit(model, data)
    metrics = trainer.callback_metrics
    for stat in ("max", "median", "min"):
        assert {f"train/dictionary/{stat}", f"val/dictionary/{stat}"} <= set(metrics)
    expected = dictionary_recovery(model.backbone.dictionary_weight, data.dictionary)
    assert metrics["val/dictionary/min"].item() == pytest.approx(expected["min"].item())


def test_errors_name_the_missing_piece(tmp_path: Path) -> None:
    image_model = CL(SmallCNN(1, 8, 16), proj_hidden_dim=16, proj_output_dim=8, batch_size=16)
    digits = DigitsDataModule(batch_size=16)
    with pytest.raises(ValueError, match="WarmStart needs a backbone exposing `dictionary_w"):
        _trainer(tmp_path, [WarmStart()], max_steps=1).fit(image_model, digits)
    with pytest.raises(ValueError, match="needs a DataModule with the ground-truth `dict"):
        DictionaryRecoveryMonitor().setup(_trainer(tmp_path, []), _simsiam(), "fit")
    for make in (lambda: WarmStart(c=-1), lambda: EncoderNormalization("diag"),
                 lambda: DictionaryRecoveryMonitor(0)):  # fmt: skip
        with pytest.raises(ValueError, match="must be"):
            make()


def _overlay_callbacks(name: str) -> dict[str, dict]:
    overlay = yaml.safe_load((ROOT / "configs/ground_truth/overlays" / name).read_text())
    return {
        c["class_path"].rsplit(".", 1)[1]: c["init_args"] for c in overlay["trainer"]["callbacks"]
    }


def test_warm_start_default_is_pokle_figs_4_to_6_c1(tmp_path: Path) -> None:
    """Pokle et al. (2022) Sec. 5.2.2: Figs. 4-6 start each row at a dictionary column plus
    N(0, σ² I), σ = 1/p^(c/2) with c = 1, "σ ≈ 0.141" at p = 50; by default and in the
    overlay. The reference walks the entries one by one (2,500 of them)."""
    assert _overlay_callbacks("warm_start.yaml")["WarmStart"]["c"] == 1.0 == WarmStart().c
    data = SparseCodingDataModule(n=64, p=50, d=10, batch_size=16, val_n=32, seed=3)
    model = BYOL(SparseCodingEncoder(50, 50), proj_num_layers=0, pred_num_layers=1)
    callback = WarmStart(seed=2)
    trainer = _trainer(tmp_path, [callback])
    trainer.datamodule = data
    callback.setup(trainer, model, "fit")
    weight, atoms = model.backbone.dictionary_weight.detach(), callback.atoms.tolist()
    residuals = [
        float(weight[i, k]) - float(data.dictionary[k, atoms[i]])
        for i in range(weight.shape[0])
        for k in range(weight.shape[1])
    ]
    mean = sum(residuals) / len(residuals)
    std = math.sqrt(sum((r - mean) ** 2 for r in residuals) / (len(residuals) - 1))
    assert abs(std - 0.141) < 0.01  # the paper's σ; sampling error about 0.002
    assert abs(mean) < 0.015
    assert set(atoms) == set(range(10))  # every atom has a row


def test_fig7_overlay_is_c2_with_rows_renormalised() -> None:
    """Pokle et al. Fig. 7: c = 2 (σ = 1/p) and unit-norm encoder rows after every step;
    WarmStart last, so the landscape study's seed override reaches it."""
    callbacks = _overlay_callbacks("warm_start_row_norm.yaml")
    assert list(callbacks)[-1] == "WarmStart" and callbacks["WarmStart"]["c"] == 2.0
    assert callbacks["EncoderNormalization"]["mode"] == "rows"
    assert "DictionaryRecoveryMonitor" in callbacks
