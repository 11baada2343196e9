"""The captured training step (``step_mode: compiled | graphs``) through the real
``Trainer.fit`` on the real CIFAR-10 images, against the eager step:

* the same per-step losses and weights after 20 steps, with the step's functions eager
  (the manual-optimisation step itself) and compiled by inductor;
* every compiled part (views, forward + loss + probe, the judges, the LARS update) traces
  as one graph: no graph break, no recompilation over 30 steps whose learning rate moves
  every step, and nothing that CUDA-graph capture forbids (host data made into tensors,
  host reads, changing shapes);
* ``graphs`` on a CPU runs eagerly and says so once; what a captured step cannot do is
  refused in one line.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger
from torch._dynamo.utils import counters

from benchmarks.step_parts import TinyNet
from ncl_lightning.data import ImageFolderDataModule
from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.methods import CL, NCL, BayesNCL
from tests.conftest import subset_copy

METHODS = {"CL": CL, "NCL": NCL, "BayesNCL": BayesNCL}
STEPS = 20


@pytest.fixture(scope="module")
def cifar_small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 32 training (4 validation) images of every class of the real CIFAR-10
    subset: 10 batches of 32 an epoch, decoded in a fraction of the whole subset's time."""
    return subset_copy(tmp_path_factory.mktemp("cifar_small"), 32, 4)


class Losses(L.Callback):
    """``train/loss`` of every step (logged every step: ``log_every_n_steps=1``)."""

    def __init__(self) -> None:
        self.values: list[float] = []

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        self.values.append(float(trainer.callback_metrics["train/loss"]))


def _model(name: str, step_mode: str, compile_step: bool = True, **kw: Any) -> L.LightningModule:
    cls = type(f"Test{name}", (METHODS[name],), {"compile_step": compile_step})
    L.seed_everything(0, verbose=False)
    return cls(
        TinyNet(), proj_hidden_dim=32, proj_output_dim=16, num_classes=10, batch_size=32,
        warmup_epochs=1.0, step_mode=step_mode, **kw,
    )  # fmt: skip


def _fit(model: L.LightningModule, root: Path, data: Path, steps: int = STEPS, **kw: Any):
    losses = Losses()
    L.seed_everything(0, verbose=False)
    trainer = L.Trainer(
        accelerator="cpu", max_steps=steps, max_epochs=100, limit_val_batches=0,
        logger=CSVLogger(root), log_every_n_steps=1, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
        default_root_dir=root, callbacks=[losses], **kw,
    )  # fmt: skip
    datamodule = ImageFolderDataModule(
        str(data), image_size=32, batch_size=32, cache="memory", augment_on="device",
        num_workers=0,
    )  # fmt: skip
    trainer.fit(model, datamodule)
    return trainer, losses.values


_EAGER: dict[str, tuple[list[float], dict[str, torch.Tensor]]] = {}


def _eager(name: str, root: Path, data: Path) -> tuple[list[float], dict[str, torch.Tensor]]:
    """The eager step's losses and final weights of ``name`` (one fit per module, shared by
    the tests that compare against it)."""
    if name not in _EAGER:
        eager = _model(name, "eager")
        _, losses = _fit(eager, root, data)
        _EAGER[name] = losses, eager.state_dict()
    return _EAGER[name]


def _compare(eager: dict[str, torch.Tensor], other: L.LightningModule, tolerance: float) -> None:
    for (name, a), b in zip(eager.items(), other.state_dict().values(), strict=True):
        if a.is_floating_point():
            torch.testing.assert_close(b, a, rtol=tolerance, atol=tolerance, msg=name)
        else:
            assert torch.equal(a, b), name


@pytest.mark.slow
@pytest.mark.parametrize("name", list(METHODS))
def test_the_manual_captured_step_equals_the_eager_step(name, cifar_small, tmp_path) -> None:
    """The captured step's own logic (manual optimisation, masked LARS, judges) with its
    functions run eagerly: the same losses and weights as Lightning's automatic step."""
    eager_losses, eager = _eager(name, tmp_path / "eager", cifar_small)
    manual = _model(name, "compiled", compile_step=False)
    _, manual_losses = _fit(manual, tmp_path / "manual", cifar_small)
    assert manual.automatic_optimization is False and len(manual_losses) == STEPS
    torch.testing.assert_close(torch.tensor(manual_losses), torch.tensor(eager_losses),
                               rtol=1e-5, atol=1e-5)  # fmt: skip
    _compare(eager, manual, 1e-5)


@pytest.mark.slow
def test_the_compiled_step_equals_the_eager_step(cifar_small, tmp_path) -> None:
    """Inductor's graphs of the whole BayesNCL step (views, forward, backward, judges,
    LARS): losses within 1e-4 and weights within 1e-3 of the eager step after 20 steps
    (fused kernels round differently; the differences grow slowly over the steps)."""
    torch._dynamo.reset()
    eager_losses, eager = _eager("BayesNCL", tmp_path / "eager", cifar_small)
    compiled = _model("BayesNCL", "compiled")
    _, compiled_losses = _fit(compiled, tmp_path / "compiled", cifar_small)
    torch.testing.assert_close(torch.tensor(compiled_losses), torch.tensor(eager_losses),
                               rtol=1e-4, atol=1e-4)  # fmt: skip
    _compare(eager, compiled, 1e-3)


# -- what capture needs -----------------------------------------------------------------
HOST_DATA = {torch.tensor, torch.as_tensor, torch.from_numpy, torch.Tensor.tolist,
             torch.Tensor.item, torch.Tensor.numpy, torch.Tensor.cpu}  # fmt: skip
HOST_METHODS = {"item", "tolist", "numpy", "cpu"}


class Recorder:
    """A ``torch.compile`` backend that runs each graph as traced (no code generation)
    and records what CUDA-graph capture forbids in it."""

    def __init__(self) -> None:
        self.graphs: list[str] = []
        self.forbidden: list[str] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        self.graphs.append(gm.code)
        for node in gm.graph.nodes:
            if node.op == "call_function" and node.target in HOST_DATA:
                self.forbidden.append(f"{node.target.__name__}: {node.format_node()}")
            if node.op == "call_method" and node.target in HOST_METHODS:
                self.forbidden.append(node.format_node())
        return gm.forward


@pytest.mark.slow
@pytest.mark.parametrize("name", list(METHODS))
def test_every_part_is_one_graph_that_never_recompiles(
    name, cifar_small, tmp_path, monkeypatch
) -> None:
    recorder = Recorder()
    compile_ = torch.compile

    def recording(fn: Any, **options: Any) -> Any:
        options.pop("mode", None)  # mode belongs to inductor
        return compile_(fn, backend=recorder, **options)

    monkeypatch.setattr(torch, "compile", recording)
    torch._dynamo.reset()
    counters.clear()
    model = _model(name, "compiled")
    trainer, losses = _fit(model, tmp_path, cifar_small, steps=30)
    assert trainer.global_step == 30 and all(torch.isfinite(torch.tensor(losses)))
    # views, forward (+ loss + probe + codes), gradient judge, buffer judge, LARS update
    assert len(recorder.graphs) == 5, [g.splitlines()[1] for g in recorder.graphs]
    assert counters["stats"]["unique_graphs"] == 5, dict(counters["stats"])
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert not counters["recompiles"], dict(counters["recompiles"])
    assert not recorder.forbidden, recorder.forbidden


def test_graphs_on_a_cpu_runs_eagerly_and_says_so(cifar_small, tmp_path, caplog) -> None:
    model = _model("NCL", "graphs")
    with caplog.at_level(logging.INFO):
        _, losses = _fit(model, tmp_path, cifar_small, steps=3)
    said = [r.getMessage() for r in caplog.records if "step_mode: graphs" in r.getMessage()]
    assert len(said) == 1 and "runs eagerly" in said[0]
    assert model.automatic_optimization and not model.captures_step and len(losses) == 3


@pytest.mark.parametrize(
    ("change", "culprit"),
    [
        ({"optimizer": lambda p: torch.optim.SGD(p, lr=0.1)}, "not SGD"),
        ({"trainer": {"gradient_clip_val": 1.0}}, "gradient_clip_val (1.0)"),
        ({"trainer": {"accumulate_grad_batches": 2}}, "accumulate_grad_batches (2)"),
    ],
    ids=["optimizer", "clipping", "accumulation"],
)
def test_what_a_captured_step_cannot_do_is_one_line(change, culprit, cifar_small, tmp_path):
    model = _model("NCL", "compiled", compile_step=False, **{
        k: v for k, v in change.items() if k != "trainer"})  # fmt: skip
    with pytest.raises(ConfigError) as info:
        _fit(model, tmp_path, cifar_small, steps=2, **change.get("trainer", {}))
    message = str(info.value)
    assert "\n" not in message and culprit in message and "step_mode" in message


def test_a_method_whose_step_cannot_be_captured_refuses_at_construction() -> None:
    from ncl_lightning.methods import BYOL
    from ncl_lightning.nn import SmallCNN

    with pytest.raises(ConfigError) as info:
        BYOL(SmallCNN(1, 8, 16), step_mode="graphs")
    message = str(info.value)
    assert "\n" not in message and message.startswith("BYOL: step_mode: graphs")
    assert BYOL(SmallCNN(1, 8, 16)).step_mode == "eager"
