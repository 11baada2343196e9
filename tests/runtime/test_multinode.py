"""A real 2-node run on one host: two ``torchrun`` launches (``--nnodes 2 --node_rank
0/1``) over loopback with gloo, ``ncl-cli fit`` end to end, against one process on the
same global batch (run in the test's own process while the nodes run): the same losses,
the same all-reduced gradients, the same weights.

The run (``tests.helpers.cluster``) has ``batch_scope: global`` and a global batch of 32:
each node loads 16, the single process 32, and the sharded sampler puts the same 32
samples (with the same seeded views) in each global batch. The SmallCNN has no BatchNorm,
so nothing depends on how the batch is split; results agree to float rounding (gloo
sums in another order).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from ncl_lightning.runtime.cli import cli_main
from tests.helpers.cluster import ROOT, digits_cluster_config, free_port, launch_env


def _write(path: Path, config: dict) -> Path:
    path.write_text(yaml.safe_dump(config))
    return path


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.allclose(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
@pytest.mark.ddp
def test_two_torchrun_nodes_equal_one_process_on_the_global_batch(tmp_path: Path) -> None:
    multi = tmp_path / "multi.pt"
    config = _write(tmp_path / "two.yaml", digits_cluster_config(tmp_path / "two", multi))
    port = str(free_port())

    def node(rank: int) -> subprocess.Popen:
        torchrun = [
            sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
            "--node_rank", str(rank), "--nproc_per_node", "1",
            "--master_addr", "127.0.0.1", "--master_port", port, "--no-python",
        ]  # fmt: skip
        cli = ["ncl-cli", "fit", "--config", str(config), "--trainer.num_nodes", "2",
               "--trainer.strategy", "ddp"]  # fmt: skip
        return subprocess.Popen(
            [*torchrun, *cli], cwd=ROOT, env=launch_env(), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip

    nodes = [node(0), node(1)]
    deterministic = torch.are_deterministic_algorithms_enabled()
    try:  # the one process runs here while the nodes start (no third interpreter to import)
        single = tmp_path / "single.pt"
        one = _write(tmp_path / "one.yaml", digits_cluster_config(tmp_path / "one", single))
        cli_main(["fit", "--config", str(one)])
        outs = [node.communicate(timeout=300)[0] for node in nodes]
    finally:
        torch.use_deterministic_algorithms(deterministic)  # the run's `deterministic: true`
        for node in nodes:
            node.kill()
    for node, out in zip(nodes, outs, strict=True):
        assert node.returncode == 0, out[-3000:]
    head = outs[0]
    assert "Batch: 2 processes (2 nodes x 1 device) x 16 per device = global batch 32" in head
    assert "sync_dist" not in head + outs[1]

    want, got = torch.load(single), torch.load(multi)
    assert len(want["losses"]) == len(got["losses"]) == 3
    for a, b in zip(want["losses"], got["losses"], strict=True):
        assert abs(a - b) <= 1e-4 * abs(a), (want["losses"], got["losses"])
    assert want["grads"].keys() == got["grads"].keys() and want["grads"]
    differ = [k for k, g in want["grads"].items() if not _close(g, got["grads"][k])]
    assert not differ, differ
    differ = [k for k, w in want["state"].items() if not _close(w, got["state"][k])]
    assert not differ, differ
