"""Real 2-process gloo run: sharded clean-split features gathered = one process (the check
runs in the shared gloo group, ``tests.gloo_group``)."""

from __future__ import annotations

import pytest
import torch

from ncl_lightning.data import DigitsDataModule
from ncl_lightning.evaluation import extract_features
from tests.evaluation.ddp_bank_worker import encoder
from tests.gloo_group import check_result, gloo_results


def _rows_sorted(x: torch.Tensor) -> torch.Tensor:
    order = sorted(range(len(x)), key=lambda i: x[i].tolist())
    return x[order]


@pytest.mark.ddp
@pytest.mark.xdist_group("gloo")
def test_uneven_shards_gather_to_the_whole_split(tmp_path_factory) -> None:
    outs = check_result(gloo_results(tmp_path_factory), "bank")
    data = DigitsDataModule(batch_size=100, num_workers=0)
    with torch.no_grad():
        feats, labels = extract_features(encoder(), data.clean_train_dataloader())
    assert [o["shard"] for o in outs] == [719, 718]  # 1,437 images: uneven shards
    for out in outs:  # every rank holds the whole bank, each image once
        assert out["feats"].shape == feats.shape
        both = torch.cat([out["feats"], out["labels"][:, None].float()], 1)
        ref = torch.cat([feats, labels[:, None].float()], 1)
        torch.testing.assert_close(_rows_sorted(both), _rows_sorted(ref))
