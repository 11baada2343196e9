"""Supervised CE / NCE classifiers: non-negativity, projector, pretrained init, training."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch
import torch.nn.functional as F

from ncl_lightning.data import DigitsDataModule
from ncl_lightning.methods import NCEClassifier
from ncl_lightning.nn import LinearClassifier, SmallCNN


def _model(**kw) -> NCEClassifier:
    kw.setdefault("num_classes", 10)
    kw.setdefault("batch_size", 64)
    return NCEClassifier(SmallCNN(1, 16, 32), **kw)


def test_nce_forward_uses_non_negative_weights_and_features() -> None:
    torch.manual_seed(0)
    model = _model(loss="nce").eval()
    assert (model.classifier.weight < 0).any()  # the free parameter may be negative ...
    w = model.classifier.effective_weight()
    assert (w >= 0).all() and torch.equal(w, model.classifier.weight.clamp(min=0))
    x = torch.randn(6, 1, 8, 8)
    out = model.encode(x)
    assert (out.z >= 0).all() and (out.z == 0).any()
    expected = F.linear(out.z, model.classifier.weight.relu(), model.classifier.bias)
    assert torch.allclose(model(x), expected)  # ... but only ReLU(W) enters the forward pass


def test_ce_is_the_plain_classifier() -> None:
    model = _model(loss="ce").eval()
    x = torch.randn(6, 1, 8, 8)
    h = model.backbone(x)
    assert torch.equal(model.encode(x).z, h) and (h < 0).any()
    assert torch.allclose(model(x), F.linear(h, model.classifier.weight, model.classifier.bias))


def test_projector_before_the_classifier() -> None:
    model = _model(loss="nce", proj_hidden_dim=64, proj_output_dim=48)
    assert model.classifier.in_features == 48
    assert model.encode(torch.randn(4, 1, 8, 8)).z.shape == (4, 48)
    with pytest.raises(ValueError, match="set both proj_hidden_dim and proj_output_dim"):
        _model(proj_hidden_dim=64)
    with pytest.raises(ValueError, match="loss must be one of 'ce', 'nce', got 'mse'"):
        _model(loss="mse")


def test_linear_classifier_gradient_flows_only_through_positive_weights() -> None:
    layer = LinearClassifier(3, 2, nonneg_weights=True)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[1.0, -1.0, 0.5], [-0.5, 2.0, 1.0]]))
    layer(torch.ones(1, 3)).sum().backward()
    assert torch.equal(layer.weight.grad != 0, layer.weight > 0)


def test_pretrained_initialisation(tmp_path: Path) -> None:
    source = _model(loss="ce")
    trainer = L.Trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=0,
                        accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    trainer.fit(source, DigitsDataModule(batch_size=64, num_workers=0, n_views=1))
    trainer.save_checkpoint(tmp_path / "ce.ckpt")
    model = _model(loss="nce", pretrained=str(tmp_path / "ce.ckpt"))
    ours, theirs = model.backbone.state_dict(), source.backbone.state_dict()
    assert all(torch.equal(ours[k], theirs[k]) for k in theirs)


@pytest.mark.slow
@pytest.mark.parametrize("loss", ["ce", "nce"])
def test_ce_and_nce_train_on_digits_well_above_chance(loss: str) -> None:
    torch.manual_seed(0)
    model = _model(loss=loss, optimizer=lambda p: torch.optim.SGD(p, lr=0.4, momentum=0.9))
    # validated once, after the last epoch: the accuracy below is that validation's
    trainer = L.Trainer(max_epochs=4, check_val_every_n_epoch=4, num_sanity_val_steps=0,
                        accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    data = DigitsDataModule(batch_size=64, num_workers=0, n_views=1, train_transform="crop_flip")
    trainer.fit(model, data)
    assert trainer.callback_metrics["val/classifier/acc_top1"] > 0.5  # chance: 0.1
    assert "train/classifier/loss" in trainer.callback_metrics


def test_lr_milestones_give_step_decay_in_a_real_fit(tmp_path: Path) -> None:
    # The NCL release's ImageNet-100 probe: SGD, lr x0.1 at epochs 60 and 80; here at 2.
    model = _model(
        batch_size=64, scale_lr=False, lr_milestones=[2], lr_gamma=0.1,
        optimizer=lambda p: torch.optim.SGD(p, lr=0.5),
    )  # fmt: skip
    seen: list[float] = []

    class Record(L.Callback):
        def on_train_epoch_start(self, trainer, pl_module) -> None:
            seen.append(trainer.optimizers[0].param_groups[0]["lr"])

    trainer = L.Trainer(max_epochs=3, limit_train_batches=2, limit_val_batches=0, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, accelerator="cpu",
                        callbacks=[Record()], default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(model, DigitsDataModule(batch_size=64, n_views=1))
    assert seen == pytest.approx([0.5, 0.5, 0.05])
    with pytest.raises(ValueError, match="lr_milestones must be >= 1"):
        _model(lr_milestones=[0])
