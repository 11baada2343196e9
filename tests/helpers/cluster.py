"""Launching ``ncl-cli`` the way a cluster does, on this host, for the scale-out tests.

:class:`RecordSteps` writes what a run computed (the loss of each step averaged over the
ranks, the all-reduced gradients of the first step, the final weights) so a test can
compare a run on several processes with one process on the same global batch.
:func:`digits_cluster_config` is the run they share: NCL on the bundled digits with a
SmallCNN without BatchNorm (a sample's features do not depend on its batch), 32-bit, no
validation, 3 steps.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback

from tests.resume_helpers import digits_run_config

ROOT = Path(__file__).resolve().parents[2]


class RecordSteps(Callback):
    """Save ``{"losses", "grads", "state"}`` to ``out`` at the end of training (rank 0)."""

    def __init__(self, out: str) -> None:
        self.out = out
        self.losses: list[float] = []
        self.grads: dict[str, torch.Tensor] = {}

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        if trainer.global_step == 0:  # after the DDP all-reduce: the gradient of the step
            self.grads = {
                name: p.grad.detach().clone()
                for name, p in pl_module.named_parameters()
                if p.grad is not None
            }

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, *args: Any) -> None:
        loss = outputs["loss"].detach() if isinstance(outputs, dict) else outputs.detach()
        self.losses.append(float(trainer.strategy.reduce(loss, reduce_op="mean")))

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.is_global_zero:
            state = {k: v.detach().clone() for k, v in pl_module.state_dict().items()}
            torch.save({"losses": self.losses, "grads": self.grads, "state": state}, self.out)


def digits_cluster_config(root: Path, record: Path, batch_size: int = 32) -> dict[str, Any]:
    """The shared run (module docstring), on the resume tests' digits run; ``batch_size``
    is the global batch."""
    cfg = digits_run_config(root, max_epochs=1)
    cfg["trainer"].update(
        limit_train_batches=3, limit_val_batches=0, precision="32-true", log_every_n_steps=1
    )
    checkpoint = cfg["trainer"]["callbacks"][0]  # ModelCheckpoint(save_last=True)
    record_steps = {
        "class_path": "tests.helpers.cluster.RecordSteps",
        "init_args": {"out": str(record)},
    }
    cfg["trainer"]["callbacks"] = [checkpoint, record_steps]
    backbone = {"in_channels": 1, "width": 8, "out_dim": 32, "batch_norm": False}
    cfg["model"] = {
        "class_path": "ncl_lightning.methods.NCL",
        "init_args": {
            "backbone": {"class_path": "ncl_lightning.nn.SmallCNN", "init_args": backbone},
            "proj_hidden_dim": 64,
            "proj_output_dim": 32,
            "warmup_epochs": 0,
        },
    }
    cfg["data"]["init_args"].update(batch_size=batch_size, batch_scope="global")
    return cfg


def free_port() -> int:
    """A TCP port nothing listens on now (for the rendezvous of one test)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_env(**extra: str) -> dict[str, str]:
    """The environment of a launched process: this interpreter's ``bin`` first on PATH (for
    ``ncl-cli``), the repository importable (``tests.helpers``), one thread, W&B offline."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TORCHELASTIC"))}
    bin_dir = str(Path(sys.executable).parent)
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=str(ROOT),
        OMP_NUM_THREADS="1",
        WANDB_MODE="offline",
        **extra,
    )
    return env
