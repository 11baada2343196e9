"""The speed switches train one step on CPU, and give the loss of the plain run:
augmentation on CPU or on the device, channels_last, bf16-mixed, torch.compile; every pair
of switch settings in one of five runs (a pairwise covering of the 16 combinations)."""

from __future__ import annotations

import math

import lightning as L
import pytest
import torch
from torch import Tensor

from ncl_lightning.data import DigitsDataModule
from ncl_lightning.losses import info_nce
from ncl_lightning.methods import NCL, Encoded
from ncl_lightning.methods.nce import NCEClassifier
from ncl_lightning.nn import SmallCNN

# The plain runs are shared by the tests of this file: one worker runs them once.
pytestmark = pytest.mark.xdist_group("performance-switches")


class _RecordingNCL(NCL):
    def objective(self, views: list[Encoded]) -> Tensor:
        loss = super().objective(views)
        self.seen = [v.z.dtype for v in views], loss.dtype, torch.is_autocast_cpu_enabled()
        z1, z2 = views[0].z.detach(), views[1].z.detach()
        self.reference = info_nce(z1.double(), z2.double(), 0.2, gather_distributed=False)
        return loss


# (augment_on, channels_last, precision, compile): each value of a switch meets each value
# of every other switch in at least one row, with compile (the costly one) in two rows only.
COMBINATIONS = [
    ("cpu", False, "32-true", True),
    ("cpu", True, "bf16-mixed", False),
    ("device", False, "bf16-mixed", False),
    ("device", True, "32-true", False),
    ("device", True, "bf16-mixed", True),
]
_PLAIN: dict[tuple[str, str], tuple[float, _RecordingNCL]] = {}


def _fit_one_step(model: L.LightningModule, augment_on: str, precision: str) -> L.Trainer:
    L.seed_everything(0, verbose=False)
    trainer = L.Trainer(
        max_epochs=1,
        limit_train_batches=1,
        limit_val_batches=0,  # training is what is checked (and eval mode would compile again)
        precision=precision,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    datamodule = DigitsDataModule(batch_size=32, num_workers=0, augment_on=augment_on)
    trainer.fit(model, datamodule)
    return trainer


def _ncl(**switches: bool) -> NCL:
    torch.manual_seed(0)
    return NCL(
        SmallCNN(1, 8, 32),
        proj_hidden_dim=32,
        proj_output_dim=16,
        num_classes=10,
        batch_size=32,
        **switches,
    )


def _plain(augment_on: str, precision: str) -> tuple[float, _RecordingNCL]:
    """The objective of the run without channels_last and compile, and its model (which
    records what its objective saw); one fit per pytest process."""
    key = (augment_on, precision)
    if key not in _PLAIN:
        torch.manual_seed(0)
        model = _RecordingNCL(
            SmallCNN(1, 8, 32), proj_hidden_dim=32, proj_output_dim=16, num_classes=10,
            batch_size=32,
        )  # fmt: skip
        trainer = _fit_one_step(model, augment_on, precision)
        _PLAIN[key] = trainer.callback_metrics["objective"].item(), model
    return _PLAIN[key]


@pytest.mark.slow
@pytest.mark.parametrize(("augment_on", "channels_last", "precision", "compile_"), COMBINATIONS)
def test_switch_combination_trains_one_step(
    augment_on: str, channels_last: bool, precision: str, compile_: bool
) -> None:
    """One step with the switches; same objective as without channels_last/compile (the
    data and initial weights are seeded), weights updated and finite, plain state keys."""
    model = _ncl(channels_last=channels_last, torch_compile=compile_)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = _fit_one_step(model, augment_on, precision)
    objective = trainer.callback_metrics["objective"].item()  # the epoch mean of one step
    assert math.isfinite(objective)
    tolerance = 1e-4 if precision == "32-true" else 3e-2  # bf16 keeps 8 bits of mantissa
    assert objective == pytest.approx(_plain(augment_on, precision)[0], rel=tolerance)
    state = model.state_dict()
    assert state.keys() == before.keys()  # no "_orig_mod." from compile: checkpoints load
    assert all(torch.isfinite(v).all() for v in state.values() if v.is_floating_point())
    assert not torch.equal(
        state["backbone.features.0.0.weight"], before["backbone.features.0.0.weight"]
    )
    conv = model.backbone.features[1][0].weight  # 8 -> 8 channels: the formats differ
    assert conv.is_contiguous(memory_format=torch.channels_last) == channels_last
    assert (model.backbone._compiled_call_impl is not None) == compile_


def test_bf16_mixed_computes_the_objective_in_float32() -> None:
    """Under bf16-mixed the backbone runs in bf16 but the objective gets float32 features
    outside autocast, so the loss matches a float64 reference on the same features."""
    objective, model = _plain("device", "bf16-mixed")  # the epoch mean of one step
    dtypes, loss_dtype, autocast_on = model.seen
    assert dtypes == [torch.float32, torch.float32] and loss_dtype == torch.float32
    assert not autocast_on
    assert objective == pytest.approx(model.reference.item(), rel=1e-5)


@pytest.mark.slow
def test_classifier_takes_the_switches() -> None:
    """The supervised classifier (NCE) trains with every switch on."""
    torch.manual_seed(0)
    model = NCEClassifier(
        SmallCNN(1, 8, 32), num_classes=10, batch_size=32, channels_last=True, torch_compile=True
    )
    trainer = _fit_one_step(model, "device", "bf16-mixed")
    assert math.isfinite(trainer.callback_metrics["train/classifier/loss"].item())
    assert model.backbone._compiled_call_impl is not None


def test_unknown_compile_mode_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="compile_mode must be one of"):
        _ncl(compile_mode="fastest")  # type: ignore[arg-type]
