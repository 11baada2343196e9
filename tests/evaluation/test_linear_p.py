"""Linear probe and fine-tuning on the raw projector output ``p`` and with a frozen projector:
NCL paper Table 7 as the NCL release's ``main_linear.py`` runs it.

The references are written out here: ``p`` as ``projector(backbone(x))`` of an independently
loaded method, the frozen parts compared weight by weight and buffer by buffer before and
after training, the trained parts by a changed weight.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import lightning as L
import pytest
import torch

from ncl_lightning import load_method
from ncl_lightning.evaluation import FineTune, LinearProbe
from ncl_lightning.evaluation.linear import PATHS, encode_space
from ncl_lightning.foundation.errors import ConfigError
from tests.evaluation.test_linear_z import FACTORIES, _pretrain, _snapshot, _train


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """CL, NCL (BatchNorm in the projector) and BayesNCL after a few digits steps: enough
    for NCL's projector output to have both signs."""
    root = tmp_path_factory.mktemp("pre_p")
    paths = {}
    for name, factory in FACTORIES.items():
        torch.manual_seed(0)
        paths[name] = _pretrain(factory(), root / f"{name}.ckpt", 1, 6)
    return paths


def _reference_p(method: L.LightningModule, x: torch.Tensor) -> torch.Tensor:
    """The raw projector output ``g(f(x))``: no map, no gate."""
    with torch.no_grad():
        return method.projector(method.backbone(x))


@pytest.mark.parametrize("name", list(FACTORIES))
def test_p_probe_reads_the_raw_projector_output(name: str, pretrained: dict[str, Path]) -> None:
    path = pretrained[name]
    probe = LinearProbe(str(path), num_classes=10, batch_size=64, space="p")
    reference = load_method(path)  # an independent copy, in eval mode
    x = torch.rand(9, 1, 8, 8)
    out = probe.encode(x)
    expected = _reference_p(reference, x)
    assert out.z.shape == (9, 16) and probe.classifier.in_features == 16
    torch.testing.assert_close(out.z, expected, rtol=0, atol=0)
    torch.testing.assert_close(out.h, reference.backbone(x).detach(), rtol=0, atol=0)
    torch.testing.assert_close(probe(x), probe.classifier(expected))
    z = reference.encode(x).z.detach()
    if name == "cl":  # no map: p is z
        torch.testing.assert_close(out.z, z, rtol=0, atol=0)
    else:  # the pre-map features: both signs, and z is their ReLU (times the gate)
        assert (out.z < 0).any() and (out.z > 0).any()
        assert not torch.equal(out.z, z)
        if name == "ncl":
            torch.testing.assert_close(torch.relu(out.z), z, rtol=0, atol=0)
    assert probe.label == "offline_linear_p"


def test_p_probe_freezes_the_whole_method(pretrained: dict[str, Path], tmp_path: Path) -> None:
    torch.manual_seed(0)
    sgd = partial(torch.optim.SGD, lr=2.0, momentum=0.9)
    probe = LinearProbe(
        str(pretrained["ncl"]), num_classes=10, batch_size=64, optimizer=sgd, space="p"
    )
    before, head_before = _snapshot(probe.method), probe.classifier.weight.clone()
    trainer = _train(probe, tmp_path, epochs=1, batches=4)
    after = probe.method.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert not torch.equal(head_before, probe.classifier.weight)
    ids = {id(p) for g in probe.param_groups() for p in g["params"]}
    assert ids == {id(p) for p in probe.classifier.parameters()}
    assert {"train/offline_linear_p/loss", "val/offline_linear_p/acc_top1"} <= set(
        trainer.callback_metrics
    )


@pytest.mark.parametrize(("name", "space"), [("ncl", "p"), ("bayesncl", "z")])
def test_freeze_projector_trains_the_encoder_through_a_frozen_projector(
    name: str, space: str, pretrained: dict[str, Path], tmp_path: Path
) -> None:
    """With ``freeze_projector`` the projector (and map, gate) keep every weight and
    BatchNorm statistic through a fit step, while the encoder and the head change."""
    torch.manual_seed(0)
    tune = FineTune(
        str(pretrained[name]), num_classes=10, batch_size=64, space=space, freeze_projector=True
    )
    method = tune.method
    frozen = [n for n in PATHS[space] if n != "backbone" and hasattr(method, n)]
    assert "projector" in frozen and ("gating_head" in frozen) == (name == "bayesncl")
    before = {part: _snapshot(getattr(method, part)) for part in [*frozen, "backbone"]}
    head_before = tune.classifier.weight.clone()
    ids = {id(p) for g in tune.param_groups() for p in g["params"]}
    expected = {id(p) for p in [*method.backbone.parameters(), *tune.classifier.parameters()]}
    assert ids == expected
    _train(tune, tmp_path, epochs=1, batches=4)
    for part in frozen:
        after = getattr(method, part).state_dict()
        assert all(torch.equal(before[part][k], after[k]) for k in after), part
        assert not getattr(method, part).training
    if name == "ncl":  # the projector's BatchNorm statistics were there to move, and did not
        assert any(k.endswith("running_mean") for k in before["projector"])
    changed = [k for k, v in method.backbone.state_dict().items()
               if not torch.equal(before["backbone"][k], v)]  # fmt: skip
    assert any(k.endswith("weight") for k in changed), changed
    assert not torch.equal(head_before, tune.classifier.weight)
    assert tune.hparams.freeze_projector is True


def test_p_finetune_without_freezing_trains_the_projector(
    pretrained: dict[str, Path], tmp_path: Path
) -> None:
    tune = FineTune(str(pretrained["cl"]), num_classes=10, batch_size=64, space="p")
    before = _snapshot(tune.method.projector)
    ids = {id(p) for g in tune.param_groups() for p in g["params"]}
    assert {id(p) for p in tune.method.projector.parameters()} <= ids
    trainer = _train(tune, tmp_path, epochs=1, batches=2)
    after = tune.method.projector.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in after)
    assert "train/offline_finetune_p/loss" in trainer.callback_metrics


def test_freeze_projector_needs_a_projector_space() -> None:
    # checked before the checkpoint is read: the file does not exist
    with pytest.raises(ConfigError, match="freeze_projector needs space: z or p") as err:
        FineTune("nowhere.ckpt", num_classes=10, freeze_projector=True)
    assert err.value.key == "freeze_projector"


def test_encode_space_spells_out_each_space(pretrained: dict[str, Path]) -> None:
    method = load_method(pretrained["bayesncl"])
    x = torch.rand(5, 1, 8, 8)
    with torch.no_grad():
        h = method.backbone(x)
        p = method.projector(h)
        z = method.encode(x).z
        assert torch.equal(encode_space(method, x, "h").z, h)
        assert torch.equal(encode_space(method, x, "p").z, p)
        assert torch.equal(encode_space(method, x, "z").z, z)
    assert not torch.equal(p, z)
