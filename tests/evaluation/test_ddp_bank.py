"""Real 2-process gloo run: sharded clean-split features gathered = one process."""

from __future__ import annotations

import pytest
import torch

from ncl_lightning.data import DigitsDataModule
from ncl_lightning.evaluation import extract_features
from tests.ddp import spawn_ranks
from tests.evaluation.ddp_bank_worker import encoder, run_rank

WORLD = 2


def _rows_sorted(x: torch.Tensor) -> torch.Tensor:
    order = sorted(range(len(x)), key=lambda i: x[i].tolist())
    return x[order]


@pytest.mark.ddp
def test_uneven_shards_gather_to_the_whole_split(tmp_path) -> None:
    spawn_ranks(run_rank, tmp_path, WORLD)
    data = DigitsDataModule(batch_size=100, num_workers=0)
    with torch.no_grad():
        feats, labels = extract_features(encoder(), data.clean_train_dataloader())
    outs = [torch.load(tmp_path / f"out{r}.pt", weights_only=True) for r in range(WORLD)]
    assert [o["shard"] for o in outs] == [719, 718]  # 1,437 images: uneven shards
    for out in outs:  # every rank holds the whole bank, each image once
        assert out["feats"].shape == feats.shape
        both = torch.cat([out["feats"], out["labels"][:, None].float()], 1)
        ref = torch.cat([feats, labels[:, None].float()], 1)
        torch.testing.assert_close(_rows_sorted(both), _rows_sorted(ref))
