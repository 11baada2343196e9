"""SupConCL / SupConNCL: the labelled objective in the training step and a short real fit."""

from __future__ import annotations

import lightning as L
import pytest
import torch

from ncl_lightning.data import DigitsDataModule
from ncl_lightning.losses.supcon import SupConLoss, supcon
from ncl_lightning.methods import CL, NCL
from ncl_lightning.methods.supcon import SupConCL, SupConNCL
from ncl_lightning.nn import SmallCNN


def _model(cls, **kw):
    torch.manual_seed(0)
    kw.setdefault("num_classes", 10)
    kw.setdefault("batch_size", 8)
    return cls(SmallCNN(1, 8, 16), proj_hidden_dim=32, proj_output_dim=12, **kw)


@pytest.mark.parametrize(("cls", "parent"), [(SupConCL, CL), (SupConNCL, NCL)])
def test_training_step_is_supcon_plus_probe(cls, parent) -> None:
    model = _model(cls, temperature=0.3, gather_distributed=False).train()  # BN: batch stats
    assert isinstance(model, parent) and cls.needs_labels and not parent.needs_labels
    assert isinstance(model.loss_fn, SupConLoss) and model.loss_fn.temperature == 0.3
    g = torch.Generator().manual_seed(1)
    views = [torch.randn(8, 1, 8, 8, generator=g), torch.randn(8, 1, 8, 8, generator=g)]
    labels = torch.tensor([0, 1, 0, 2, 1, 0, 3, 3])
    loss = model.training_step((views, labels), 0)
    e1, e2 = model.encode(views[0]), model.encode(views[1])
    probe, _ = model.online.probe_loss(e1.h, labels)
    expected = supcon(e1.z, e2.z, labels, 0.3, gather_distributed=False)
    torch.testing.assert_close(loss, expected + probe)
    assert not torch.isclose(expected, supcon(e1.z, e2.z, torch.arange(8), 0.3, False))
    if cls is SupConNCL:
        assert (e1.z >= 0).all() and (e2.z >= 0).all()
    else:
        assert (e1.z < 0).any()


def test_bad_objective_views_and_temperature_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="loss must be 'info_nce', got 'spectral'"):
        _model(SupConNCL, loss="spectral")
    with pytest.raises(ValueError, match="temperature must be > 0"):
        _model(SupConCL, temperature=0.0)
    model = _model(SupConCL)
    views = [model.encode(torch.randn(4, 1, 8, 8)) for _ in range(3)]
    with pytest.raises(ValueError, match="SupConCL expects 2 views per image, got 3"):
        model.objective(views, torch.zeros(4, dtype=torch.long))


def test_supcon_ncl_fits_digits_well_above_chance(tmp_path) -> None:
    torch.manual_seed(0)
    model = SupConNCL(SmallCNN(1, 32, 128), proj_hidden_dim=256, proj_output_dim=64,
                      num_classes=10, batch_size=128, warmup_epochs=1, knn_k=20)  # fmt: skip
    # validated once, after the last epoch: the metrics below are that validation's
    trainer = L.Trainer(accelerator="cpu", max_epochs=4, check_val_every_n_epoch=4,
                        num_sanity_val_steps=0, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(model, DigitsDataModule(batch_size=128))
    metrics = trainer.callback_metrics
    assert torch.isfinite(metrics["objective"])  # the epoch mean
    # chance is 0.1; this run reaches about 0.73 (probe) and 0.89 (kNN) on one thread here
    assert float(metrics["val/online_acc"]) > 0.6, metrics
    assert float(metrics["val/knn_acc"]) > 0.85, metrics
