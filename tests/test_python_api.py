"""The Python API: the lazy top level, and NCL trained with a plain ``lightning.Trainer``
(batch-scaled learning rate, ``num_classes`` from the DataModule, the warmup-cosine schedule
over ``max_steps`` as over ``max_epochs``) as examples/python/train_ncl_digits.py does."""

from __future__ import annotations

import ast
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import pytest
import torch
import yaml
from lightning.pytorch.loggers import CSVLogger

import ncl_lightning
from ncl_lightning import NCL, ConfigError, DigitsDataModule, SmallCNN, load_method
from ncl_lightning.methods.trainable import check_schedule_length
from ncl_lightning.optim.batch_report import batch_layout
from tests.conftest import ROOT

EXAMPLE = ROOT / "examples" / "python" / "train_ncl_digits.py"


def _python(code: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, check=False
    )


def test_importing_the_package_loads_neither_torch_nor_lightning() -> None:
    code = (
        "import sys, ncl_lightning\n"
        "heavy = [m for m in ('torch', 'lightning', 'torchvision') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "assert 'NCL' in dir(ncl_lightning)\n"
    )
    done = _python(code)
    assert done.returncode == 0, done.stderr


def test_every_public_name_resolves_to_its_module() -> None:
    table = ncl_lightning._MODULE_OF
    assert sorted(ncl_lightning.__all__) == sorted([*table, "__version__"])
    for name in ncl_lightning.__all__:
        value = getattr(ncl_lightning, name)
        if name != "__version__":
            assert value is getattr(sys.modules[table[name]], name), name
    assert set(ncl_lightning.__all__) <= set(dir(ncl_lightning))


def test_type_checkers_see_the_same_names() -> None:
    """The ``if TYPE_CHECKING:`` imports name each public name from its module."""
    tree = ast.parse((ROOT / "ncl_lightning" / "__init__.py").read_text())
    block = next(
        n for n in tree.body if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)
    )
    imported = {
        alias.name: node.module
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert imported == ncl_lightning._MODULE_OF


def test_an_unknown_name_raises_attribute_error_naming_it() -> None:
    with pytest.raises(AttributeError, match="'NotAMethod'"):
        _ = ncl_lightning.NotAMethod
    with pytest.raises(ImportError, match="NotAMethod"):
        exec("from ncl_lightning import NotAMethod")


def test_the_lr_scale_reads_the_datamodule_batch_when_the_loader_has_none() -> None:
    trainer = SimpleNamespace(
        train_dataloader=SimpleNamespace(batch_size=None), num_nodes=1, num_devices=1,
        accumulate_grad_batches=1, datamodule=SimpleNamespace(per_device_batch_size=96),
    )  # fmt: skip
    assert batch_layout(trainer, None, required=True).per_device == 96
    assert batch_layout(trainer, 7, required=True).per_device == 96  # the DataModule wins
    trainer.datamodule = None
    assert batch_layout(trainer, 7, required=True).per_device == 7
    with pytest.raises(ConfigError, match="pass batch_size=<per-device batch> to the module"):
        batch_layout(trainer, None, required=True)


@pytest.mark.parametrize(("epochs", "steps"), [(-1, -1), (-1, 0), (0, -1), (0, 5), (None, -1)])
def test_a_run_without_a_finite_length_is_refused_in_one_line(
    epochs: int | None, steps: int
) -> None:
    with pytest.raises(ConfigError, match=r"set trainer.max_epochs >= 1 or trainer.max_steps >= 1"):
        check_schedule_length(epochs, steps)
    check_schedule_length(-1, 3)  # Trainer(max_steps=3)
    check_schedule_length(2, -1)


def reference_lr(peak: float, step: int, warmup: int, total: int) -> float:
    """Linear warmup over ``warmup`` steps, then cosine to 0 at ``total`` (written out)."""
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * 0.5 * (1.0 + math.cos(math.pi * (step - warmup) / (total - warmup)))


class _Rates(L.Callback):
    """The first group's learning rate of each optimiser step."""

    def __init__(self) -> None:
        self.rates: list[float] = []

    def on_train_batch_start(self, trainer: L.Trainer, *args: object) -> None:
        self.rates.append(trainer.optimizers[0].param_groups[0]["lr"])


@pytest.mark.parametrize(
    ("max_epochs", "max_steps", "limit", "total", "per_epoch"),
    [(-1, 8, 1.0, 8, 5), (2, -1, 3, 6, 3)],
    ids=["max_steps", "max_epochs"],
)
def test_ncl_trains_with_a_plain_trainer_on_the_schedule_of_the_reference(
    tmp_path: Path, max_epochs: int, max_steps: int, limit: float, total: int, per_epoch: int
) -> None:
    """No batch_size, no num_classes: the DataModule gives both; warmup_epochs=1 is one
    epoch of steps whether max_steps or max_epochs ends the run."""
    torch.manual_seed(0)
    data = DigitsDataModule(batch_size=256)  # 1,437 training images: 5 full batches
    model = NCL(
        SmallCNN(1, 8, 16), proj_hidden_dim=32, proj_output_dim=16, warmup_epochs=1,
        optimizer=lambda params: torch.optim.SGD(params, lr=0.4), knn_k=5,
    )  # fmt: skip
    rates = _Rates()
    trainer = L.Trainer(
        accelerator="cpu", max_epochs=max_epochs, max_steps=max_steps,
        limit_train_batches=limit, limit_val_batches=1, logger=CSVLogger(tmp_path),
        enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False, num_sanity_val_steps=0,
        default_root_dir=tmp_path, callbacks=[rates],
    )  # fmt: skip
    trainer.fit(model, data)
    peak = 0.4 * 256 / 256
    expected = [reference_lr(peak, t, per_epoch, total) for t in range(total)]
    assert rates.rates == pytest.approx(expected, rel=1e-12, abs=1e-15)
    assert model.hparams.num_classes == 10 and model.online is not None
    assert 0.0 <= float(trainer.callback_metrics["val/knn_acc"]) <= 1.0
    path = tmp_path / "ncl.ckpt"
    trainer.save_checkpoint(path)
    loaded = load_method(path)
    assert loaded.hparams.num_classes == 10 and loaded.online is not None
    # the logger (whose hparams Lightning merges with the DataModule's: one key with two
    # values is refused) records the values the module took from the DataModule
    logged = yaml.safe_load((Path(trainer.logger.log_dir) / "hparams.yaml").read_text())
    assert logged["batch_size"] == 256 and logged["num_classes"] == 10
    assert loaded.hparams.batch_size == 256


@pytest.mark.slow
def test_the_python_example_trains_and_prints_its_metrics(tmp_path: Path) -> None:
    env = {**os.environ, "WANDB_MODE": "offline", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "3"], capture_output=True, text=True, cwd=tmp_path,
        env=env, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    found = re.search(r"kNN accuracy ([\d.]+), z sparsity ([\d.]+)", done.stdout)
    assert found, done.stdout[-2000:]
    knn, sparsity = float(found[1]), float(found[2])
    # chance is 0.1; after the first epoch (warmup, BatchNorm running statistics not yet
    # settled) kNN can still be near chance (0.16 on one host), after three it is not (0.66)
    assert 0.3 < knn <= 1.0
    assert 0.0 <= sparsity <= 1.0
    assert not list(tmp_path.iterdir()), "logger=False, no checkpoints: nothing is written"


@pytest.mark.slow
def test_the_readme_python_snippet_trains(tmp_path: Path) -> None:
    """The README's Python lines run as shown (one epoch, two batches, instead of ten)."""
    readme = (ROOT / "README.md").read_text()
    snippet = re.search(r"```python\n(.*?)```", readme, re.S)
    assert snippet and "from ncl_lightning import" in snippet[1], "no Python block in README"
    code = snippet[1].replace("max_epochs=10", "max_epochs=1, limit_train_batches=2")
    assert code != snippet[1], "the README's Trainer line changed: update this test"
    code += "print('trained', model.trainer.global_step)\n"
    env = {**os.environ, "WANDB_MODE": "offline", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env,
        timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "trained 2" in done.stdout, done.stdout[-2000:]
