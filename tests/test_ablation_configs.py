"""The BayesNCL ablation overlays and the ResNet-18 subset configs build what they claim.

Each overlay of ``configs/ablations/`` is resolved on top of its base config by the parser
``ncl-cli`` uses (``ncl-cli fit --config <base> --config <overlay>``, parsed in-process,
nothing run) and the model is built from the result. The overlaid model must differ from
the base one exactly as the overlay says (the gate class, ``detach_gate_input``, the
depth of the gating head, NCLTopK's ``k``), and in nothing else: same resolved arguments
but the overlay's keys, same parameter shapes but the gating head's.

The three ``configs/subset/resnet18/`` configs must build a ResNet-18 with the CIFAR stem
and differ only in the method (and the run names). Models are built on the CPU: SmallCNN
models cost milliseconds, ResNet-18 a fraction of a second.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from lightning.pytorch import LightningDataModule, LightningModule
from torch import nn

from ncl_lightning.methods import CL, NCL, BayesNCL, NCLTopK
from ncl_lightning.nn.backbones import ResNet
from ncl_lightning.nn.gates import GumbelGate, SoftGate, STEGate
from ncl_lightning.runtime.cli import NCLCLI, TypedTrainer
from tests.conftest import ROOT

CONFIGS = ROOT / "configs"
BAYES_BASES = {
    "digits": "demo/digits_bayesncl.yaml",
    "subset": "subset/cifar10_subset_bayesncl.yaml",
}
NCL_BASES = {"digits": "demo/digits_ncl.yaml", "subset": "subset/cifar10_subset_ncl.yaml"}
# Overlay -> the resolved model arguments it changes.
BAYES_OVERLAYS = {
    "soft_gate": {"gate": "soft"},
    "gumbel_gate": {"gate": "gumbel"},
    "no_detach": {"detach_gate_input": False},
    "gate_1layer": {"gate_layers": 1},
    "gate_3layer": {"gate_layers": 3},
}
# Data -> (k, BayesNCL's measured z sparsity there: docs/results.md, 3 seeds).
TOPK = {"digits": (4, 0.934), "subset": (76, 0.702)}
RESNET18 = "subset/resnet18/cifar10_subset_resnet18_{}.yaml"


class _ParseOnly(NCLCLI):
    """``NCLCLI`` that builds its parser and stops: nothing instantiated, nothing run."""

    def _set_seed(self) -> None:
        """Leave the test process's random state alone."""

    def instantiate_classes(self) -> None:
        """The tests instantiate what they need."""

    def _run_subcommand(self, subcommand: str) -> None:
        """Nothing is run."""


class Built:
    """A config resolved by ``ncl-cli``'s parser, and the model built from it."""

    def __init__(self, cli: NCLCLI, *configs: str) -> None:
        args = ["fit"]
        for config in configs:
            args += ["--config", str(CONFIGS / config)]
        cfg = cli.parser.parse_args(args)
        self.resolved: dict[str, Any] = cfg["fit"].clone().as_dict()
        self.resolved.pop("config", None)  # the --config paths themselves
        # Lightning's instantiator gives a module the hyper-parameters of ``cli.config``
        # (dumped once into ``cli.config_dump``), not of the namespace being instantiated:
        # point both at this config, or every model would get the first config's hparams.
        cli.config = cfg
        if hasattr(cli, "config_dump"):
            del cli.config_dump
        parser = cli.parser
        instantiate = getattr(parser, "instantiate", None) or parser.instantiate_classes
        self.model: LightningModule = instantiate(cfg)["fit"]["model"]

    @property
    def args(self) -> dict[str, Any]:
        """The resolved ``model.init_args``."""
        return self.resolved["model"]["init_args"]


@pytest.fixture(scope="module")
def build() -> Any:
    """``build(*configs)``: one parser (building it imports every class, seconds) for all
    the configs of the module; each combination is built once."""
    cli = _ParseOnly(
        model_class=LightningModule,
        datamodule_class=LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        trainer_class=TypedTrainer,
        args=["fit", "--config", str(CONFIGS / BAYES_BASES["digits"])],
        auto_configure_optimizers=False,
        save_config_callback=None,
    )
    cache: dict[tuple[str, ...], Built] = {}

    def _build(*configs: str) -> Built:
        if configs not in cache:
            cache[configs] = Built(cli, *configs)
        return cache[configs]

    return _build


def linear_layers(module: nn.Module) -> int:
    return sum(isinstance(m, nn.Linear) for m in module.modules())


def shapes(model: nn.Module, skip: str | None = None) -> dict[str, tuple[int, ...]]:
    """Parameter and buffer shapes by name, leaving out names starting with ``skip``."""
    return {
        name: tuple(t.shape)
        for name, t in model.state_dict().items()
        if skip is None or not name.startswith(skip)
    }


def differing(a: dict[str, Any], b: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Keys whose values differ (a key missing on one side counts, as ``<missing>``)."""
    missing = "<missing>"
    return {
        k: (a.get(k, missing), b.get(k, missing))
        for k in sorted(set(a) | set(b))
        if a.get(k, missing) != b.get(k, missing)
    }


# -- BayesNCL gate ablations --------------------------------------------------------------
@pytest.mark.parametrize("data", sorted(BAYES_BASES))
def test_bayesncl_base_is_the_paper_gate(build: Any, data: str) -> None:
    """What the overlays change away from: STE gate, detached input, 2-layer head."""
    model = build(BAYES_BASES[data]).model
    assert type(model) is BayesNCL
    assert isinstance(model.gate, STEGate)
    assert model.hparams.detach_gate_input is True
    assert linear_layers(model.gating_head) == 2


@pytest.mark.parametrize("data", sorted(BAYES_BASES))
@pytest.mark.parametrize("overlay", sorted(BAYES_OVERLAYS))
def test_gate_overlay_changes_only_its_keys(build: Any, overlay: str, data: str) -> None:
    base = build(BAYES_BASES[data])
    ablated = build(BAYES_BASES[data], f"ablations/{overlay}.yaml")
    changes = BAYES_OVERLAYS[overlay]
    assert differing(base.args, ablated.args) == {k: (base.args[k], v) for k, v in changes.items()}
    # Trainer, data and seed are the base's: only the model is ablated.
    assert {k: v for k, v in ablated.resolved.items() if k != "model"} == {
        k: v for k, v in base.resolved.items() if k != "model"
    }
    assert ablated.resolved["model"]["class_path"] == base.resolved["model"]["class_path"]

    model = ablated.model
    assert type(model) is BayesNCL
    gate = {"soft": SoftGate, "gumbel": GumbelGate}.get(changes.get("gate", "ste"), STEGate)
    assert type(model.gate) is gate
    assert model.hparams.detach_gate_input is changes.get("detach_gate_input", True)
    assert linear_layers(model.gating_head) == changes.get("gate_layers", 2)
    assert shapes(model, skip="gating_head") == shapes(base.model, skip="gating_head")
    if "gate_layers" not in changes:
        assert shapes(model) == shapes(base.model)


def test_no_detach_lets_the_gate_input_carry_gradient(build: Any) -> None:
    """Behaviour, not only the flag: the gate's probabilities reach the backbone features."""
    for configs, expect in (
        ((BAYES_BASES["digits"],), False),
        ((BAYES_BASES["digits"], "ablations/no_detach.yaml"), True),
    ):
        model = build(*configs).model
        h = torch.randn(4, model.backbone.out_dim, requires_grad=True)
        model.gate_probs(h).sum().backward()
        assert (h.grad is not None and bool(h.grad.abs().sum() > 0)) is expect, configs


# -- NCL + TopK ---------------------------------------------------------------------------
@pytest.mark.parametrize("data", sorted(TOPK))
def test_topk_overlay_is_ncl_with_k_matched_to_bayesncl_sparsity(build: Any, data: str) -> None:
    k, sparsity = TOPK[data]
    base = build(NCL_BASES[data])
    topk = build(NCL_BASES[data], f"ablations/topk_{data}.yaml")
    assert base.resolved["model"]["class_path"] == "ncl_lightning.methods.NCL"
    assert topk.resolved["model"]["class_path"] == "ncl_lightning.methods.NCLTopK"
    # Everything but k is the NCL base's: backbone, projector, loss, temperature, optimiser.
    assert differing(base.args, topk.args) == {"topk": ("<missing>", k)}
    assert {k_: v for k_, v in topk.resolved.items() if k_ != "model"} == {
        k_: v for k_, v in base.resolved.items() if k_ != "model"
    }

    model, ncl = topk.model, base.model
    assert type(model) is NCLTopK and type(ncl) is NCL
    assert model.topk == k
    d = model.projector.out_dim
    assert round((1 - sparsity) * d) == k  # k = the open share of BayesNCL's features
    assert shapes(model) == shapes(ncl)
    assert model.backbone.spec == ncl.backbone.spec
    assert model.loss_fn.temperature == ncl.loss_fn.temperature
    assert type(model.nonneg) is type(ncl.nonneg)
    # The features keep exactly k of d dimensions per sample (positive inputs: the
    # non-negative map zeroes none of them itself).
    z = model.features(torch.rand(8, d) + 0.1)
    assert ((z != 0).sum(dim=1) == k).all()


# -- ResNet-18 on the subset --------------------------------------------------------------
def test_resnet18_configs_build_a_cifar_stem_resnet18(build: Any) -> None:
    for method in ("cl", "ncl", "bayesncl"):
        built = build(RESNET18.format(method))
        net = built.model.backbone
        assert isinstance(net, ResNet), method
        assert net.spec["init_args"]["depth"] == 18 and net.out_dim == 512
        assert [len(getattr(net, f"layer{i}")) for i in (1, 2, 3, 4)] == [2, 2, 2, 2]
        # CIFAR stem: 3x3 stride-1 first convolution, no max-pool.
        assert net.conv1.kernel_size == (3, 3) and net.conv1.stride == (1, 1)
        assert isinstance(net.maxpool, nn.Identity)
        assert built.model.hparams.channels_last is True
        trainer = built.resolved["trainer"]
        assert trainer["precision"] == "32-true" and trainer["max_epochs"] == 30
        assert built.args["warmup_epochs"] == 3


def _run_names_removed(trainer: dict[str, Any]) -> dict[str, Any]:
    """The trainer section without what names the run (root, logger) and without the
    spaces FeatureStatistics measures (BayesNCL adds its gate ``mask``)."""
    out = {k: v for k, v in trainer.items() if k not in ("default_root_dir", "logger")}
    callbacks = []
    for callback in trainer["callbacks"]:
        args = {k: v for k, v in callback.get("init_args", {}).items() if k != "spaces"}
        callbacks.append({**callback, "init_args": args})
    out["callbacks"] = callbacks
    return out


def test_resnet18_configs_differ_only_in_the_method(build: Any) -> None:
    cl, ncl, bayes = (build(RESNET18.format(m)) for m in ("cl", "ncl", "bayesncl"))
    assert (type(cl.model), type(ncl.model), type(bayes.model)) == (CL, NCL, BayesNCL)

    # Arguments: NCL adds nonneg to CL's; BayesNCL adds the gate's to NCL's; the shared
    # ones (backbone, projector, loss, temperature, optimiser, schedule) are equal.
    assert set(ncl.args) - set(cl.args) == {"nonneg"}
    assert not set(cl.args) - set(ncl.args)
    assert not set(ncl.args) - set(bayes.args)
    gate_keys = set(bayes.args) - set(ncl.args)
    assert {"gate", "prior", "kl_weight", "gate_layers", "detach_gate_input"} <= gate_keys
    assert all(k.startswith(("gate", "prior", "kl_", "threshold", "detach")) for k in gate_keys)
    for a, b in ((cl, ncl), (ncl, bayes)):
        shared = set(a.args) & set(b.args)
        assert differing({k: a.args[k] for k in shared}, {k: b.args[k] for k in shared}) == {}

    # Data, seed and trainer are the same up to the run names.
    for other in (ncl, bayes):
        assert other.resolved["data"] == cl.resolved["data"]
        assert other.resolved["seed_everything"] == cl.resolved["seed_everything"]
        assert _run_names_removed(other.resolved["trainer"]) == _run_names_removed(
            cl.resolved["trainer"]
        )

    # Built models: CL has no non-negative map; BayesNCL is NCL plus the gating head.
    assert not hasattr(cl.model, "nonneg") and not hasattr(ncl.model, "gating_head")
    assert type(ncl.model.nonneg) is type(bayes.model.nonneg)
    assert isinstance(bayes.model.gate, STEGate) and linear_layers(bayes.model.gating_head) == 2
    assert shapes(cl.model) == shapes(ncl.model)
    assert shapes(bayes.model, skip="gating_head") == {
        **shapes(ncl.model),
        **{k: v for k, v in shapes(bayes.model).items() if k.startswith("open_frequency")},
    }
