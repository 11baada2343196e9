"""load_backbone / load_method: round trips from every method, and refusal of bad files."""

from __future__ import annotations

import os
from pathlib import Path

import lightning as L
import pytest
import torch

from ncl_lightning import CheckpointError, load_backbone, load_method
from ncl_lightning.checkpoints.load import RECORD_KEY
from ncl_lightning.data import DigitsDataModule
from ncl_lightning.evaluation import LinearProbe
from ncl_lightning.methods import CL, NCL, BayesNCL, NCEClassifier
from ncl_lightning.nn import ResNet, SmallCNN

HEADS = {"proj_hidden_dim": 32, "proj_output_dim": 16}
FACTORIES = {
    "cl": lambda: CL(SmallCNN(1, 8, 24), num_classes=10, batch_size=64, **HEADS),
    "ncl": lambda: NCL(SmallCNN(1, 8, 24), num_classes=10, batch_size=64, **HEADS),
    "bayesncl": lambda: BayesNCL(SmallCNN(1, 8, 24), num_classes=10, batch_size=64, **HEADS),
    "nce": lambda: NCEClassifier(SmallCNN(1, 8, 24), num_classes=10, batch_size=64, loss="nce"),
}


def _fit_and_save(
    model: L.LightningModule, path: Path, n_views: int = 2, epochs: int = 1, batches: int = 2
) -> Path:
    trainer = L.Trainer(max_epochs=epochs, limit_train_batches=batches, limit_val_batches=1,
                        accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=path.parent)  # fmt: skip
    data = DigitsDataModule(batch_size=64, num_workers=0, n_views=n_views)
    trainer.fit(model, data)
    trainer.save_checkpoint(path)
    return path


@pytest.fixture(scope="module")
def checkpoints(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, tuple[Path, L.LightningModule]]:
    # Seeds 0 and 3 once blew BayesNCL's BatchNorm weights up to 1e9+ here (issue 17: a
    # gated-to-zero feature row had a 1/eps gradient in the loss); covered by
    # tests/methods/test_nonfinite_gradients.py.
    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("ckpts")
    out = {}
    for name, factory in FACTORIES.items():
        model = factory()
        views = 1 if name == "nce" else 2
        out[name] = (_fit_and_save(model, root / f"{name}.ckpt", views), model)
    return out


@pytest.mark.parametrize("name", list(FACTORIES))
def test_backbone_round_trip(name: str, checkpoints) -> None:
    path, model = checkpoints[name]
    backbone = load_backbone(path)
    assert isinstance(backbone, SmallCNN) and backbone.out_dim == 24
    state, expected = backbone.state_dict(), model.backbone.state_dict()
    assert state.keys() == expected.keys()
    assert all(torch.equal(state[k], expected[k]) for k in state)
    x = torch.randn(5, 1, 8, 8)
    assert torch.equal(backbone.eval()(x), model.backbone.eval()(x))


def test_probe_checkpoint_records_the_pretrained_backbone(checkpoints, tmp_path: Path) -> None:
    probe = LinearProbe(str(checkpoints["ncl"][0]), num_classes=10, batch_size=64)
    path = _fit_and_save(probe, tmp_path / "probe.ckpt", n_views=1)
    again = load_backbone(path)
    ours, theirs = again.state_dict(), probe.backbone.state_dict()
    assert all(torch.equal(ours[k], theirs[k]) for k in theirs)


def test_load_method_rebuilds_projector_and_map(checkpoints) -> None:
    path, model = checkpoints["ncl"]
    method = load_method(path)
    assert isinstance(method, NCL) and not method.training
    x = torch.randn(4, 1, 8, 8)
    assert torch.equal(method.encode(x).z, model.eval().encode(x).z)


def test_a_resnet_spec_round_trips(tmp_path: Path) -> None:
    module = NCL(ResNet(18, "cifar", in_channels=1), num_classes=10, batch_size=64, **HEADS)
    path = tmp_path / "resnet.ckpt"
    torch.save({"state_dict": module.state_dict(), RECORD_KEY: {
        "format": 1, "method": "ncl_lightning.methods.ncl.NCL", "backbone": module.backbone.spec}},
        path)  # fmt: skip
    backbone = load_backbone(path)
    assert isinstance(backbone, ResNet) and backbone.conv1.in_channels == 1
    assert backbone.conv1.padding == (2, 2)  # the spec records the padding it was built with


@pytest.mark.parametrize(("record_format", "padding"), [(1, (1, 1)), (2, (2, 2))])
def test_an_older_record_rebuilds_the_stem_it_was_trained_with(
    tmp_path: Path, record_format: int, padding: tuple[int, int]
) -> None:
    """Format-1 records name a CIFAR-stem ResNet without ``stem_padding``: trained with the
    then default 1 (32x32 maps), rebuilt with it, by load_backbone and load_method alike."""
    module = NCL(ResNet(18, "cifar", in_channels=1, stem_padding=1), num_classes=10,
                 batch_size=64, **HEADS)  # fmt: skip
    old_spec = {"class_path": "ncl_lightning.nn.ResNet",
                "init_args": {"depth": 18, "stem": "cifar", "in_channels": 1}}  # fmt: skip
    path = tmp_path / "old.ckpt"
    torch.save({"state_dict": module.state_dict(), RECORD_KEY: {
        "format": record_format, "method": "ncl_lightning.methods.ncl.NCL",
        "backbone": old_spec}}, path)  # fmt: skip
    assert load_backbone(path).conv1.padding == padding


class _Exploit:
    """Unpickling this runs ``os.system`` and creates a file."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self):
        return (os.system, (f"touch {self.target}",))


def test_malicious_pickle_is_refused_and_runs_nothing(checkpoints, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    ckpt = torch.load(checkpoints["ncl"][0], weights_only=True)
    ckpt["payload"] = _Exploit(marker)
    path = tmp_path / "evil.ckpt"
    torch.save(ckpt, path)
    with pytest.raises(
        CheckpointError, match=r"refusing to load .*evil\.ckpt.*execute code.*GLOBAL posix\.system"
    ):
        load_backbone(path)
    with pytest.raises(CheckpointError, match="refusing to load"):
        load_method(path)
    assert not marker.exists()


def test_foreign_checkpoint_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "foreign.pt"
    torch.save({"model": SmallCNN().state_dict()}, path)
    with pytest.raises(CheckpointError, match=r"not an ncl-lightning checkpoint .*'model'"):
        load_backbone(path)
    text = tmp_path / "notes.ckpt"
    text.write_text("not a checkpoint")
    with pytest.raises(CheckpointError, match=r"cannot read checkpoint .*not a torch\.save zip"):
        load_backbone(text)
    with pytest.raises(FileNotFoundError, match="checkpoint not found"):
        load_backbone(tmp_path / "missing.ckpt")


def _tampered(checkpoints, tmp_path: Path, edit) -> Path:
    ckpt = torch.load(checkpoints["ncl"][0], weights_only=True)
    edit(ckpt)
    path = tmp_path / "tampered.ckpt"
    torch.save(ckpt, path)
    return path


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda c: c[RECORD_KEY]["backbone"].update(class_path="os.system"),
         r"names class 'os\.system' from a module that is not trusted"),
        (lambda c: c[RECORD_KEY]["backbone"].update(class_path="torch.Tensor"),
         r"backbone 'torch\.Tensor' is not a Module subclass"),
        (lambda c: c[RECORD_KEY]["backbone"].update(class_path="ncl_lightning.nn.Nowhere"),
         r"backbone class 'ncl_lightning\.nn\.Nowhere' cannot be imported"),
        (lambda c: c["state_dict"].pop("backbone.fc.weight"),
         r"weights do not fit SmallCNN: missing keys \['fc\.weight'\]"),
        (lambda c: c["state_dict"].update({"backbone.extra": torch.zeros(1)}),
         r"unexpected keys \['extra'\]"),
        (lambda c: c["state_dict"].update({"backbone.fc.weight": torch.zeros(3, 3)}),
         r"weights do not fit SmallCNN: size mismatch for fc\.weight: copying a "
         r"param with shape torch\.Size\(\[3, 3\]\)"),
        (lambda c: c[RECORD_KEY].update(method="subprocess.Popen"),
         r"'ncl_lightning\.method' names class 'subprocess\.Popen' from a module that is not "
         r"trusted"),
        (lambda c: c[RECORD_KEY].update(method="ncl_lightning.nn.SmallCNN"),
         r"method 'ncl_lightning\.nn\.SmallCNN' is not a LightningModule subclass"),
    ],
)  # fmt: skip
def test_tampered_checkpoint_is_a_clear_error(checkpoints, tmp_path: Path, edit, match) -> None:
    path = _tampered(checkpoints, tmp_path, edit)
    loader = load_method if "method" in match else load_backbone
    with pytest.raises(CheckpointError, match=match):
        loader(path)


def test_unrecorded_backbone_needs_an_architecture(checkpoints, tmp_path: Path) -> None:
    path = _tampered(checkpoints, tmp_path, lambda c: c[RECORD_KEY].update(backbone=None))
    with pytest.raises(CheckpointError, match="pass load_backbone"):
        load_backbone(path)
    assert isinstance(load_backbone(path, backbone=SmallCNN(1, 8, 24)), SmallCNN)


def test_load_method_inside_a_cli_instantiation(checkpoints) -> None:
    """ncl-cli builds FeatureSelection inside its "given hyper-parameters" context; the
    method loaded there must be built from its own checkpoint's hyper-parameters."""
    from lightning.pytorch.core.mixins.hparams_mixin import _given_hyperparameters_context

    path, model = checkpoints["bayesncl"]
    with _given_hyperparameters_context({"checkpoint": str(path)}, "x"):
        method = load_method(path)
    assert isinstance(method, BayesNCL)
    x = torch.randn(4, 1, 8, 8)
    assert torch.equal(method.encode(x).z, model.eval().encode(x).z)


def test_a_weights_only_save_still_loads_its_backbone(checkpoints, tmp_path: Path) -> None:
    """Lightning runs no callback for ``save_weights_only``; the module writes the record
    (here of a trainer without loggers)."""
    path, model = checkpoints["ncl"]
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    assert "loggers" in ckpt[RECORD_KEY]  # the full record of a normal save
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=tmp_path)  # fmt: skip
    trainer.strategy.connect(model)
    trainer.save_checkpoint(tmp_path / "weights.ckpt", weights_only=True)
    saved = torch.load(tmp_path / "weights.ckpt", map_location="cpu", weights_only=True)
    assert "optimizer_states" not in saved and saved[RECORD_KEY]["loggers"] == []
    backbone = load_backbone(tmp_path / "weights.ckpt")
    for name, value in model.backbone.state_dict().items():
        assert torch.equal(backbone.state_dict()[name], value.cpu())
