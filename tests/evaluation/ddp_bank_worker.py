"""Check of the evaluation feature banks in the 2-process gloo group (``tests.gloo_group``)."""

from __future__ import annotations

import torch

from ncl_lightning.data import DigitsDataModule
from ncl_lightning.evaluation import extract_features
from ncl_lightning.nn import SmallCNN


def encoder() -> SmallCNN:
    torch.manual_seed(0)
    return SmallCNN(1, 8, 16).eval()


def rank_result(rank: int, world: int) -> dict:
    """In the running group, extract this rank's shard of the clean digits training split
    and gather it."""
    data = DigitsDataModule(batch_size=100, num_workers=0)
    loader = data.clean_train_dataloader(rank, world)
    with torch.no_grad():
        feats, labels = extract_features(encoder(), loader)
    return {"feats": feats, "labels": labels, "shard": len(loader.dataset)}
