"""Worker of the 2-process gloo test of the evaluation feature banks (importable)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from ncl_lightning.data import DigitsDataModule
from ncl_lightning.evaluation import extract_features
from ncl_lightning.nn import SmallCNN


def encoder() -> SmallCNN:
    torch.manual_seed(0)
    return SmallCNN(1, 8, 16).eval()


def run_rank(rank: int, world: int, init_file: str, out_file: str) -> None:
    """Extract this rank's shard of the clean digits training split and gather it."""
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        data = DigitsDataModule(batch_size=100, num_workers=0)
        loader = data.clean_train_dataloader(rank, world)
        with torch.no_grad():
            feats, labels = extract_features(encoder(), loader)
        torch.save({"feats": feats, "labels": labels, "shard": len(loader.dataset)}, out_file)
    finally:
        dist.destroy_process_group()
