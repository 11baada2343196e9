"""Offline kNN against a brute-force reference written here."""

from __future__ import annotations

import math
from itertools import islice
from pathlib import Path

import lightning as L
import torch

from ncl_lightning import load_backbone
from ncl_lightning.data import DigitsDataModule
from ncl_lightning.evaluation import KNNClassifier
from tests.evaluation.test_linear import pretrained  # noqa: F401 - fixture


def _reference_accuracy(bank, bank_y, queries, query_y, k: int, t: float) -> float:
    hits = 0
    for q, y in zip(queries, query_y, strict=True):
        sims = [(float(s), int(c)) for s, c in zip(bank @ q, bank_y, strict=True)]
        sims.sort(key=lambda s: -s[0])
        votes: dict[int, float] = {}
        for s, c in sims[:k]:
            votes[c] = votes.get(c, 0.0) + math.exp(s / t)
        hits += max(votes, key=votes.get) == int(y)
    return hits / len(query_y)


def test_knn_matches_brute_force(pretrained: Path, tmp_path: Path) -> None:  # noqa: F811
    # The whole training split in the bank; the first 100 test images as queries.
    data = DigitsDataModule(batch_size=100, num_workers=0)
    knn = KNNClassifier(str(pretrained), num_classes=10, k=7, temperature=0.1)
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=tmp_path,
                        limit_test_batches=1)  # fmt: skip
    trainer.test(knn, data)
    got = trainer.callback_metrics["test/offline_knn/acc_top1"].item()

    encoder = load_backbone(pretrained).eval()
    with torch.no_grad():

        def feats(loader):
            xs, ys = zip(*[(encoder(x), y) for x, y in loader], strict=True)
            return torch.nn.functional.normalize(torch.cat(xs), dim=1), torch.cat(ys)

        bank, bank_y = feats(data.clean_train_dataloader())
        queries, query_y = feats(islice(data.test_dataloader(), 1))
    assert len(bank) > 1000 and len(queries) == 100
    expected = _reference_accuracy(bank, bank_y, queries, query_y, k=7, t=0.1)
    print(f"measured: kNN accuracy {got:.4f}, reference {expected:.4f}")
    assert abs(got - expected) < 1e-6
    assert got > 0.5
