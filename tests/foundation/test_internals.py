"""The private APIs the package relies on are all still where ``foundation/internals.py``
expects them (an upgrade that moves one fails here, naming it), and no other module uses
one."""

from __future__ import annotations

import ast
from pathlib import Path

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ncl_lightning.foundation import internals


def test_every_private_api_is_present() -> None:
    missing = internals.missing_private_apis()
    assert not missing, (
        f"private APIs moved by an upgrade: {missing}; update ncl_lightning/foundation/internals.py"
    )


# -- the one door: no other module names a private third-party name ---------------------
PACKAGE = Path(internals.__file__).resolve().parents[1]
THIRD_PARTY = (
    "lightning",
    "pytorch_lightning",
    "lightning_fabric",
    "jsonargparse",
    "wandb",
    "torch",
)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_uses(path: Path, listed: set[str], root: Path = PACKAGE.parent) -> list[str]:
    """``file:line ...`` for each import of a private third-party name (or from a private
    module) and each use of a name :data:`~internals.PRIVATE_APIS` lists: an attribute, a
    method defined under that name, a string (``getattr(x, "_name")``)."""
    where = f"{path.relative_to(root)}:"
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            parts = node.module.split(".")
            names = [a.name for a in node.names]
            if parts[0] in THIRD_PARTY and any(map(_private, parts + names)):
                found.append((node.lineno, f"from {node.module} import {', '.join(names)}"))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] in THIRD_PARTY and any(map(_private, parts)):
                    found.append((node.lineno, f"import {alias.name}"))
        elif isinstance(node, ast.Attribute) and node.attr in listed:
            found.append((node.lineno, f".{node.attr}"))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in listed:
            found.append((node.lineno, f"def {node.name}"))
        elif isinstance(node, ast.Constant) and node.value in listed:
            found.append((node.lineno, f"{node.value!r}"))
    return [f"{where}{line} {what}" for line, what in sorted(found)]


def test_private_names_are_used_only_in_internals() -> None:
    """Only ``foundation/internals.py`` imports a private name of Lightning, jsonargparse,
    wandb or torch, or names one of :data:`~internals.PRIVATE_APIS`; everything else goes
    through its functions, so the upgrade check above covers every private name used."""
    listed = {dotted.rsplit(".", 1)[-1] for _, dotted in internals.PRIVATE_APIS}
    door = Path(internals.__file__).resolve()
    leaks = [
        line
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.resolve() != door
        for line in private_uses(path, listed)
    ]
    assert not leaks, "private names outside foundation/internals.py:\n" + "\n".join(leaks)


def test_the_scan_finds_each_kind_of_leak(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from lightning.fabric.utilities.types import _PATH\n"
        "from jsonargparse._typehints import ActionTypeHint\n"
        "import wandb.sdk._private\n"
        "x = trainer._logger_connector\n"
        "y = getattr(parser, '_actions', [])\n"
        "class C:\n"
        "    def _parse_ckpt_path(self): ...\n"
        "from lightning.pytorch import Trainer\n"
        "from ncl_lightning.foundation import _mine\n"
        "z = self._own\n"
    )
    listed = {"_logger_connector", "_actions", "_parse_ckpt_path"}
    found = private_uses(probe, listed, root=tmp_path)
    assert [line.split()[0] for line in found] == [f"probe.py:{n}" for n in (1, 2, 3, 4, 5, 7)]


class _Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.built_by_cli = internals.built_by_cli()
        self.layer = nn.Linear(2, 1)
        self.seen: list[tuple[int, int, int, int]] = []

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        t = self.trainer
        self.seen.append(
            (
                internals.epochs_processed(t),
                internals.batches_processed(t),
                internals.batches_fetched_total(t),
                internals.batch_index(t),
            )
        )
        return self.layer(batch[0]).sum()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_fit_loop_counters_read_off_a_real_run(tmp_path) -> None:
    data = DataLoader(TensorDataset(torch.zeros(6, 2)), batch_size=2)
    module = _Tiny()
    trainer = L.Trainer(
        max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=tmp_path,
    )  # fmt: skip
    trainer.fit(module, data)
    assert not module.built_by_cli
    # (epoch started, batches done in the epoch, batches fetched in the run, batch index)
    assert module.seen == [(e, b, 3 * e + b + 1, b) for e in range(2) for b in range(3)]


def test_outside_cli_restores_the_hand_over() -> None:
    from lightning.pytorch.core.mixins import hparams_mixin

    token = hparams_mixin._given_hyperparameters.set({"a": 1})
    try:
        assert internals.built_by_cli()
        with internals.outside_cli():
            assert not internals.built_by_cli()
        assert internals.built_by_cli()
    finally:
        hparams_mixin._given_hyperparameters.reset(token)
