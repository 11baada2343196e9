"""A 2-process CPU DDP ``ncl-cli fit`` prints no "use ``sync_dist=True``" warning, and
splits a global batch.

Both runs are the real entry point in one subprocess, one after the other (Lightning's
``ddp`` launcher starts the second rank, gloo on loopback; the second run joins its
group), on the bundled digits with the demo config's callbacks (FeatureStatistics with
SEPIN, TopActivations; BayesNCL's gate summary; the NCE classifier's accuracies).
BayesNCL is NCL with a gate: its run logs every NCL key too (the kNN and online
accuracies, the statistics of z and h), so one run covers both methods.
Lightning warns once per key logged at epoch level without ``sync_dist=True``; the per-rank
values are averaged over the ranks and the global ones (reduced by their torchmetrics
states) are logged with ``sync_dist=True`` too, so the output holds no such line.
:class:`RankMetrics` writes every rank's ``callback_metrics``: each key has the same value
on both ranks, the premise of that choice (docs/metrics.md, "Logging under DDP"). The
exception is a classifier's ``train/{label}/acc_top*_step``, the accuracy of the rank's own
shard of the last batch (not warned about: on step).

The BayesNCL run has ``batch_scope: global``: each rank loads half the global batch of 64,
the learning rates are scaled by the global batch, and rank 0 alone prints the summary
line; the NCE run keeps ``batch_scope: device`` (32 per device, global batch 64).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

import lightning as L
import pytest
import torch
import yaml

from tests.conftest import ROOT
from tests.helpers.cluster import free_port, launch_env


class RankMetrics(L.Callback):
    """Write ``{key: value}`` of the trainer's ``callback_metrics`` to ``<out>/rank<r>.json``
    at the end of fit, one file per rank."""

    def __init__(self, out: str) -> None:
        self.out = Path(out)

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        values = {k: float(v) for k, v in trainer.callback_metrics.items()}
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / f"rank{trainer.global_rank}.json").write_text(json.dumps(values))


def _config(name: str, tmp: Path) -> Path:
    """The demo config ``name`` with 1 epoch of 2 + 2 batches on 2 CPU ranks, the run's data
    settings (:data:`RUNS`) and :class:`RankMetrics` added to its callbacks."""
    config = yaml.safe_load((ROOT / "configs" / "demo" / f"{name}.yaml").read_text())
    config["trainer"] |= {
        "devices": 2, "accelerator": "cpu", "strategy": "ddp", "max_epochs": 1,
        "limit_train_batches": 2, "limit_val_batches": 2, "check_val_every_n_epoch": 1,
        "enable_progress_bar": False, "enable_model_summary": False,
        "default_root_dir": str(tmp / "run"),
    }  # fmt: skip
    config["trainer"]["logger"]["init_args"]["save_dir"] = str(tmp / "run")
    config["trainer"]["callbacks"].append(
        {"class_path": f"{__name__}.RankMetrics", "init_args": {"out": str(tmp / "ranks")}}
    )
    config["data"]["init_args"] |= RUNS[name].data
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


class Run(NamedTuple):
    keys: list[str]  # of each logging family, that must reach callback_metrics
    data: dict[str, Any]  # data settings
    batch: str  # the summary line rank 0 prints


NCL_KEYS = ["train/loss", "val/online_acc", "val/knn_acc", "val/z/sparsity",
            "val/h/effective_rank", "val/z/sepin@all"]  # fmt: skip
RUNS = {
    "digits_bayesncl": Run(
        [*NCL_KEYS, "train/kl", "val/gate/open_rate", "val/gate/never_open_dims",
         "val/mask/active_dims", "val/z/semantic_consistency"],
        {"batch_size": 64, "batch_scope": "global"},
        "Batch: 2 processes (1 node x 2 devices) x 32 per device = global batch 64 "
        "(batch_scope: global); learning rates 0.4, 0.1 -> 0.1, 0.025 (x 64/256, lr scaled by "
        "global batch / 256); learning rate 0.1 not scaled (their groups set scale_lr false); "
        "loader: main process (num_workers: 0)",
    ),
    "digits_nce": Run(
        ["train/classifier/loss", "val/classifier/acc_top1", "val/z/sparsity"],
        {"batch_size": 32},
        "Batch: 2 processes (1 node x 2 devices) x 32 per device = global batch 64 "
        "(batch_scope: device); learning rate 0.1 -> 0.025 (x 64/256, lr scaled by global "
        "batch / 256); loader: main process (num_workers: 0)",
    ),
}  # fmt: skip


# Both fits in one 2-process group (two interpreter starts, not four): ``ncl-cli``'s entry
# point called once per config by this script, which Lightning's ``ddp`` launcher runs
# again as rank 1 (LOCAL_RANK set); the second fit joins the group the first one made.
TWO_FITS = """
import sys
from ncl_lightning.runtime.cli import main
for config in sys.argv[1:]:
    main(["fit", "--config", config])
"""


@pytest.mark.slow
@pytest.mark.ddp
def test_two_process_fits_print_no_sync_dist_warning(tmp_path: Path) -> None:
    (tmp_path / "two_fits.py").write_text(TWO_FITS)
    configs = [str(_config(name, tmp_path / name)) for name in RUNS]
    run = subprocess.run(
        [sys.executable, str(tmp_path / "two_fits.py"), *configs], cwd=ROOT,
        env=launch_env(MASTER_PORT=str(free_port())), capture_output=True, text=True,
        timeout=400,
    )  # fmt: skip
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-3000:]
    assert "Starting with 2 processes" in out
    warned = [line for line in out.splitlines() if "sync_dist" in line]
    assert not warned, "\n".join(warned)
    # each rank loads its share of the global batch; rank 0 alone prints the summary, per fit
    batch = [line for line in out.splitlines() if line.startswith("Batch:")]
    pinned = ", pinned" if torch.cuda.is_available() else ""
    assert batch == [r.batch + pinned for r in RUNS.values()], out[-3000:]

    for name, expected in RUNS.items():
        ranks: list[dict[str, Any]] = [
            json.loads((tmp_path / name / "ranks" / f"rank{r}.json").read_text()) for r in (0, 1)
        ]
        assert set(expected.keys) <= set(ranks[0]), (name, sorted(ranks[0]))
        assert ranks[0].keys() == ranks[1].keys(), name
        differ = {
            k: (v, ranks[1][k])
            for k, v in ranks[0].items()
            if not k.endswith("_step")
            and not math.isclose(v, ranks[1][k], rel_tol=1e-6, abs_tol=1e-9)
        }
        assert not differ, (name, differ)
