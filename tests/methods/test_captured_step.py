"""The captured training step (``step_mode: compiled | graphs``) through the real
``Trainer.fit`` on the real CIFAR-10 images, against the eager step:

* each compiled part (views, forward + loss + probe, the judges, the LARS update) traced by
  ``torch.compile`` as one graph and run as traced (no code generation): the same per-step
  losses and weights as the eager step after 12 steps, in 5 graphs with no graph break, no
  recompilation while the learning rate moves every step, and nothing that CUDA-graph
  capture forbids (host data made into tensors, host reads, changing shapes);
* inductor's code for the whole BayesNCL step: the same losses and weights within the
  rounding of fused kernels;
* ``graphs`` on a CPU runs eagerly and says so once; what a captured step cannot do is
  refused in one line.

One fit per method and kind, shared by the tests that read it (an xdist group each).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
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
STEPS = 12  # past the end of the first epoch (10 batches); the learning rate moves every step
BATCH = 16


@pytest.fixture(scope="module")
def cifar_small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 16 training (2 validation) images of every class of the real CIFAR-10
    subset: 10 batches of 16 an epoch, decoded in a fraction of the whole subset's time."""
    return subset_copy(tmp_path_factory.mktemp("cifar_small"), BATCH, 2)


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
        TinyNet(), proj_hidden_dim=32, proj_output_dim=16, num_classes=10, batch_size=BATCH,
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
        str(data), image_size=32, batch_size=BATCH, cache="memory", augment_on="device",
        num_workers=0,
    )  # fmt: skip
    trainer.fit(model, datamodule)
    return trainer, losses.values


@dataclass
class Run:
    model: L.LightningModule
    steps: int
    losses: list[float]
    state: dict[str, torch.Tensor]
    graphs: list[str] | None = None  # the traced runs: each graph's code
    forbidden: list[str] | None = None  # what CUDA-graph capture forbids, found in them
    counters: dict[str, dict[str, int]] | None = None  # dynamo's, after the fit


_RUNS: dict[tuple[str, str], Run] = {}


def _run(kind: str, name: str, data: Path, tmp: pytest.TempPathFactory) -> Run:
    """The fit of ``name`` with the ``eager`` step, the captured step ``traced`` (each
    graph run as dynamo traced it) or ``inductor``-compiled; one per pytest process."""
    if (kind, name) not in _RUNS:
        _RUNS[kind, name] = _fit_run(kind, name, data, tmp.mktemp(f"{kind}-{name}"))
    return _RUNS[kind, name]


def _fit_run(kind: str, name: str, data: Path, root: Path) -> Run:
    if kind == "eager":
        model = _model(name, "eager")
        trainer, losses = _fit(model, root, data)
        return Run(model, trainer.global_step, losses, model.state_dict())
    recorder = Recorder() if kind == "traced" else None
    compile_ = torch.compile

    def recording(fn: Any, **options: Any) -> Any:
        options.pop("mode", None)  # mode belongs to inductor
        return compile_(fn, backend=recorder, **options)

    torch._dynamo.reset()
    counters.clear()
    model = _model(name, "compiled")
    with pytest.MonkeyPatch.context() as patch:
        if recorder is not None:
            patch.setattr(torch, "compile", recording)
        trainer, losses = _fit(model, root, data)
    seen = {k: dict(counters[k]) for k in ("stats", "graph_break", "recompiles")}
    return Run(
        model, trainer.global_step, losses, model.state_dict(),
        recorder.graphs if recorder else None, recorder.forbidden if recorder else None, seen,
    )  # fmt: skip


def _compare(eager: Run, other: Run, tolerance: float) -> None:
    assert other.steps == eager.steps == len(other.losses) == len(eager.losses) == STEPS
    torch.testing.assert_close(torch.tensor(other.losses), torch.tensor(eager.losses),
                               rtol=tolerance, atol=tolerance)  # fmt: skip


def _compare_weights(eager: Run, other: Run, tolerance: float) -> None:
    assert eager.state.keys() == other.state.keys()
    for name, a in eager.state.items():
        b = other.state[name]
        if a.is_floating_point():
            torch.testing.assert_close(b, a, rtol=tolerance, atol=tolerance, msg=name)
        else:
            assert torch.equal(a, b), name


def _method(name: str) -> Any:
    return pytest.param(name, id=name, marks=pytest.mark.xdist_group(f"captured-{name}"))


@pytest.mark.slow
@pytest.mark.parametrize("name", [_method(n) for n in METHODS])
def test_the_traced_captured_step_equals_the_eager_step(name, cifar_small, tmp_path_factory):
    """The captured step (manual optimisation, masked LARS, judges) with each graph run as
    traced: the same losses and weights as Lightning's automatic step within 1e-5."""
    eager = _run("eager", name, cifar_small, tmp_path_factory)
    traced = _run("traced", name, cifar_small, tmp_path_factory)
    assert traced.model.automatic_optimization is False
    assert eager.model.automatic_optimization is True
    _compare(eager, traced, 1e-5)
    _compare_weights(eager, traced, 1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("name", [_method("BayesNCL")])
def test_the_compiled_step_equals_the_eager_step(name, cifar_small, tmp_path_factory) -> None:
    """Inductor's graphs of the whole BayesNCL step (views, forward, backward, judges,
    LARS): losses within 1e-4 and weights within 1e-3 of the eager step after 12 steps
    (fused kernels round differently; the differences grow slowly over the steps)."""
    eager = _run("eager", name, cifar_small, tmp_path_factory)
    compiled = _run("inductor", name, cifar_small, tmp_path_factory)
    assert compiled.counters is not None and compiled.counters["stats"]["unique_graphs"] == 5
    _compare(eager, compiled, 1e-4)
    _compare_weights(eager, compiled, 1e-3)


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
@pytest.mark.parametrize("name", [_method(n) for n in METHODS])
def test_every_part_is_one_graph_that_never_recompiles(name, cifar_small, tmp_path_factory):
    run = _run("traced", name, cifar_small, tmp_path_factory)
    assert run.steps == STEPS and all(torch.isfinite(torch.tensor(run.losses)))
    assert run.graphs is not None and run.counters is not None
    # views, forward (+ loss + probe + codes), gradient judge, buffer judge, LARS update
    assert len(run.graphs) == 5, [g.splitlines()[1] for g in run.graphs]
    assert run.counters["stats"]["unique_graphs"] == 5, run.counters["stats"]
    assert not run.counters["graph_break"], run.counters["graph_break"]
    assert not run.counters["recompiles"], run.counters["recompiles"]
    assert not run.forbidden, run.forbidden


def test_graphs_on_a_cpu_runs_eagerly_and_says_so(cifar_small, tmp_path, caplog) -> None:
    model = _model("NCL", "graphs")
    with caplog.at_level(logging.INFO):
        _, losses = _fit(model, tmp_path, cifar_small, steps=2)
    said = [r.getMessage() for r in caplog.records if "step_mode: graphs" in r.getMessage()]
    assert len(said) == 1 and "runs eagerly" in said[0]
    assert model.automatic_optimization and not model.captures_step and len(losses) == 2


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
