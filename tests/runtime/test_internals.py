"""The private APIs the package relies on are all still where ``runtime/internals.py``
expects them: an upgrade that moves one fails here, naming it."""

from __future__ import annotations

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ncl_lightning.runtime import internals


def test_every_private_api_is_present() -> None:
    missing = internals.missing_private_apis()
    assert not missing, (
        f"private APIs moved by an upgrade: {missing}; update ncl_lightning/runtime/internals.py"
    )


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
