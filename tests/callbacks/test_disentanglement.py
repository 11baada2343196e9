"""``Disentanglement`` callback: MIG of constructed codes through a real Trainer, and DDP."""

from __future__ import annotations

import math

import lightning as L
import pytest
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

from ncl_lightning.callbacks.disentanglement import Disentanglement, _PerFactorMIG
from ncl_lightning.data.dsprites import DSPRITES_FACTOR_NAMES, DSPRITES_FACTOR_SIZES
from ncl_lightning.methods.ssl import Encoded
from ncl_lightning.metrics.functional.mig import (
    mutual_information_gap,
    mutual_information_gap_per_factor,
)
from tests.ddp import spawn_ranks

N = 2000


def make_factors(n: int = N, seed: int = 0) -> torch.Tensor:
    """Independent uniform dSprites-sized factors ``[n, 5]``."""
    g = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randint(0, s, (n,), generator=g) for s in DSPRITES_FACTOR_SIZES], 1)


class CodesModel(L.LightningModule):
    """Eval steps return the batch's codes: ``z`` as given, ``h`` a random rotation of them."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(1)
        self.register_buffer("rotation", torch.linalg.qr(torch.randn(dim, dim, generator=g))[0])

    def _step(self, batch) -> Encoded:
        codes, _ = batch
        return Encoded(h=codes @ self.rotation, z=codes)

    def validation_step(self, batch, batch_idx):
        return self._step(batch)

    def test_step(self, batch, batch_idx):
        return self._step(batch)


class FactorData(L.LightningDataModule):
    factor_names = DSPRITES_FACTOR_NAMES

    def __init__(self, codes: torch.Tensor, factors: torch.Tensor) -> None:
        super().__init__()
        self.codes, self.factors = codes, factors

    def val_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(self.codes, self.factors), batch_size=256)

    test_dataloader = val_dataloader


def evaluate(codes: torch.Tensor, factors: torch.Tensor, stage: str = "validate", **kwargs):
    trainer = L.Trainer(
        accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
        enable_model_summary=False, callbacks=[Disentanglement(**kwargs)],
    )  # fmt: skip
    getattr(trainer, stage)(CodesModel(codes.shape[1]), datamodule=FactorData(codes, factors))
    return {k: v.item() for k, v in trainer.callback_metrics.items()}


def test_codes_equal_to_factors_give_high_mig():
    factors = make_factors()
    codes = factors.float() + 0.01 * torch.rand(N, 5, generator=torch.Generator().manual_seed(2))
    got = evaluate(codes, factors)
    expected = mutual_information_gap(codes, factors).item()
    assert got["val/z/mig"] == pytest.approx(expected, rel=1e-5)
    assert got["val/z/mig"] > 0.8
    # Per factor: shape and scale have <= 20 values, so their code bins them exactly (the
    # gap is below 1 only by the finite-sample MI of the runner-up dimension).
    assert got["val/z/mig/shape"] > 0.95 and got["val/z/mig/scale"] > 0.95
    per_factor = mutual_information_gap_per_factor(codes, factors)
    for name, value in zip(DSPRITES_FACTOR_NAMES, per_factor.tolist(), strict=True):
        assert got[f"val/z/mig/{name}"] == pytest.approx(value, rel=1e-5)
    # A rotation mixes the factors over every dimension: the gap collapses.
    assert got["val/h/mig"] < 0.3


def test_random_codes_give_mig_near_zero_at_test():
    factors = make_factors()
    codes = torch.randn(N, 10, generator=torch.Generator().manual_seed(3))
    got = evaluate(codes, factors, stage="test")
    assert got["test/z/mig"] == pytest.approx(mutual_information_gap(codes, factors).item())
    assert got["test/z/mig"] < 0.05 and "val/z/mig" not in got


def test_max_samples_and_spaces():
    factors = make_factors()
    codes = factors.float()
    got = evaluate(codes, factors, spaces=["z"], max_samples=300, per_factor=False)
    assert got["val/z/mig"] == pytest.approx(
        mutual_information_gap(codes[:300], factors[:300]).item()
    )
    assert set(got) == {"val/z/mig"}


def test_float_labels_and_missing_space_raise():
    codes = torch.randn(64, 4)
    with pytest.raises(ValueError, match=r"integer factor labels \[B, K\]"):
        evaluate(codes, torch.rand(64, 5))
    with pytest.raises(ValueError, match=r"integer factor labels \[B, K\]"):
        evaluate(codes, torch.randint(0, 3, (64,)))
    with pytest.raises(ValueError, match="mask"):
        evaluate(codes, make_factors(64), spaces=["z", "mask"])


@pytest.mark.parametrize(
    ("kwargs", "culprit"),
    [({"spaces": []}, "spaces"), ({"num_bins": 0}, "num_bins"),
     ({"max_samples": 0}, "max_samples"), ({"every_n_epochs": 0}, "every_n_epochs")],
)  # fmt: skip
def test_bad_arguments_raise(kwargs, culprit):
    with pytest.raises(ValueError, match=culprit) as error:
        Disentanglement(**kwargs)
    assert "\n" not in str(error.value)


def test_per_factor_mig_matches_the_mean_and_marks_constant_factors():
    factors = make_factors(500)
    factors[:, 1] = 4  # a constant factor has no entropy: NaN, left out of the mean
    codes = torch.randn(500, 6, generator=torch.Generator().manual_seed(4))
    gaps = mutual_information_gap_per_factor(codes, factors)
    assert math.isnan(gaps[1].item()) and not gaps[[0, 2, 3, 4]].isnan().any()
    assert gaps.nanmean().item() == pytest.approx(mutual_information_gap(codes, factors).item())


# -- DDP: two gloo ranks give the value of one process on all the samples ---------------
RANK_SLICES = (slice(0, 700), slice(700, N))


def _run_rank(rank: int, world: int, init_file: str, out_file: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        factors = make_factors()
        codes = factors.float() + torch.randn(N, 5, generator=torch.Generator().manual_seed(5))
        metric = _PerFactorMIG(num_bins=20)
        part = RANK_SLICES[rank]
        metric.update(codes[part][:300], factors[part][:300])  # uneven batches
        metric.update(codes[part][300:], factors[part][300:])
        torch.save(metric.compute(), out_file)
    finally:
        dist.destroy_process_group()


@pytest.mark.ddp
def test_two_ranks_equal_one_process(tmp_path):
    spawn_ranks(_run_rank, tmp_path, len(RANK_SLICES))
    factors = make_factors()
    codes = factors.float() + torch.randn(N, 5, generator=torch.Generator().manual_seed(5))
    expected = mutual_information_gap_per_factor(codes, factors)
    alone = mutual_information_gap_per_factor(codes[RANK_SLICES[0]], factors[RANK_SLICES[0]])
    assert not torch.allclose(alone, expected)  # the comparison can fail without a sync
    for rank in range(len(RANK_SLICES)):
        torch.testing.assert_close(torch.load(tmp_path / f"out{rank}.pt"), expected)
