"""CL / NCL modules: features, hooks, optimiser groups and learning-rate scaling."""

from __future__ import annotations

from functools import partial
from unittest.mock import PropertyMock, patch

import lightning as L
import pytest
import torch
from torch import Tensor

from ncl_lightning.losses import spectral_contrastive
from ncl_lightning.methods import CL, NCL, Encoded
from ncl_lightning.nn import SmallCNN
from ncl_lightning.optim import LARS


def _model(cls=CL, **kw) -> CL:
    kw.setdefault("num_classes", 10)
    kw.setdefault("batch_size", 8)
    return cls(
        SmallCNN(in_channels=1, width=8, out_dim=16), proj_hidden_dim=32, proj_output_dim=12, **kw
    )


def test_ncl_features_are_non_negative_and_cl_features_are_not() -> None:
    torch.manual_seed(0)
    x = torch.randn(16, 1, 8, 8)
    ncl, cl = _model(NCL).eval(), _model(CL).eval()
    assert (ncl.encode(x).z >= 0).all()
    assert (ncl.encode(x).z == 0).any()  # exact zeros from the ReLU forward
    assert (cl.encode(x).z < 0).any()


@pytest.mark.parametrize("name", ["relu", "rep_relu", "softplus", "sigmoid", "exp"])
def test_ncl_accepts_every_registered_map(name: str) -> None:
    z = _model(NCL, nonneg=name).eval().encode(torch.randn(4, 1, 8, 8)).z
    assert z.shape == (4, 12) and (z >= 0).all()


def test_unknown_names_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="unknown non-negative map 'tanh'; valid names:"):
        _model(NCL, nonneg="tanh")
    with pytest.raises(ValueError, match="unknown objective 'byol'"):
        _model(CL, loss="byol")
    with pytest.raises(ValueError, match="temperature must be > 0"):
        _model(CL, temperature=-1.0)


def test_new_objective_by_subclassing_one_hook() -> None:
    class SpectralNCL(NCL):
        def objective(self, views: list[Encoded]) -> Tensor:
            return spectral_contrastive(views[0].z, views[1].z, gather_distributed=False)

    model = _model(SpectralNCL)
    views = [torch.randn(8, 1, 8, 8), torch.randn(8, 1, 8, 8)]
    loss = model.training_step((views, torch.randint(0, 10, (8,))), 0)
    expected = spectral_contrastive(model.encode(views[0]).z, model.encode(views[1]).z, False)
    assert torch.isfinite(loss) and loss > expected  # includes the probe's CE term too


def test_param_groups_exclude_bias_norm_and_probe_from_decay() -> None:
    model = _model(CL)
    groups = model.param_groups()
    assert len(groups) == 3
    decay, no_decay, probe = groups
    assert (
        "weight_decay" not in decay and no_decay["weight_decay"] == 0.0 and no_decay["lars_exclude"]
    )
    assert probe["params"] == list(model.online.parameters()) and probe["lr"] == 0.1
    n_params = sum(len(g["params"]) for g in groups)
    assert n_params == len(list(model.parameters()))
    assert all(p.ndim == 1 for p in no_decay["params"])


def test_lr_is_scaled_by_global_batch_and_warms_up(tmp_path) -> None:
    model = _model(CL, batch_size=64, warmup_epochs=1.0)
    trainer = L.Trainer(max_epochs=2, accelerator="cpu", default_root_dir=tmp_path, logger=False)
    model.trainer = trainer
    steps = PropertyMock(return_value=10)  # no dataloader is attached in this unit test
    per_epoch = PropertyMock(return_value=5)  # 2 epochs of 5 steps
    with (
        patch.object(type(trainer), "estimated_stepping_batches", new=steps),
        patch.object(type(trainer), "num_training_batches", new=per_epoch),
    ):
        conf = model.configure_optimizers()
    opt = conf["optimizer"]
    assert isinstance(opt, LARS)
    peak = [g["initial_lr"] for g in opt.param_groups]
    assert peak[0] == pytest.approx(0.3 * 64 / 256) and peak[-1] == pytest.approx(0.1 * 64 / 256)
    assert opt.param_groups[0]["lr"] < peak[0]  # warmup starts low


def test_no_classes_means_no_online_evaluation() -> None:
    model = _model(CL, num_classes=0)
    assert model.online is None
    views = [torch.randn(4, 1, 8, 8), torch.randn(4, 1, 8, 8)]
    assert torch.isfinite(model.training_step((views, torch.zeros(4, dtype=torch.long)), 0))


@pytest.mark.parametrize(
    "factory",
    [
        partial(torch.optim.SGD, lr=0.1, momentum=0.9, weight_decay=1e-4),
        partial(torch.optim.AdamW, lr=1e-3, weight_decay=0.05),
        partial(LARS, lr=0.3, weight_decay=1e-4),
    ],
    ids=["sgd", "adamw", "lars"],
)
def test_every_optimiser_trains_with_the_method_groups(factory, tmp_path) -> None:
    model = _model(NCL, optimizer=factory, warmup_epochs=0.0)
    views = [torch.randn(8, 1, 8, 8), torch.randn(8, 1, 8, 8)]
    labels = torch.randint(0, 10, (8,))
    items = [([views[0][i], views[1][i]], labels[i]) for i in range(8)]
    loader = torch.utils.data.DataLoader(items, batch_size=4)  # collates to ([v1, v2], y)
    before = [p.detach().clone() for p in model.backbone.parameters()]
    trainer = L.Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(model, loader)
    opt = trainer.optimizers[0]
    assert isinstance(opt, factory.func)
    assert [g["weight_decay"] for g in opt.param_groups][1:] == [0.0, 0.0]
    assert any(
        not torch.equal(a, b) for a, b in zip(before, model.backbone.parameters(), strict=True)
    )
