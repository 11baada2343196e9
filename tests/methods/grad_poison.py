"""Test callbacks (importable by ``class_path``): poison one gradient, parameter or buffer at
a chosen step, and record the module's state around that step."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import torch


class Poison(L.Callback):
    """Set the first element of ``target``'s gradient (``what="grad"``, after backward) or
    of ``target`` itself (``"parameter"``, after the optimiser step) to ``value`` at
    ``step`` (on ``rank`` only, if given); with ``record``, save the state dict and the
    optimiser state at the start of batches ``step`` and ``step + 1`` there. ``value`` is a
    string (``"inf"``, ``"nan"``): the CLI refuses non-finite numbers."""

    def __init__(
        self, step: int, target: str, value: str = "inf", what: str = "grad",
        rank: int | None = None, record: str | None = None,
    ) -> None:  # fmt: skip
        self.step, self.target, self.value, self.what = step, target, float(value), what
        self.rank, self.record = rank, record

    def _here(self, trainer: L.Trainer) -> bool:
        rank_ok = self.rank is None or trainer.global_rank == self.rank
        return trainer.global_step == self.step and rank_ok

    def on_after_backward(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if self.what == "grad" and self._here(trainer):
            dict(module.named_parameters())[self.target].grad.view(-1)[0] = self.value

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        if self.what == "parameter" and trainer.global_step == self.step + 1:
            with torch.no_grad():
                dict(module.named_parameters())[self.target].view(-1)[0] = self.value

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        # The guard judges the last batch at the start of this one: let it (and put back
        # what a non-finite batch changed) before recording, whichever callback runs first.
        module.nonfinite_guard().resolve(trainer, module)
        if self.record and batch_idx in (self.step, self.step + 1):
            state = {k: v.detach().clone() for k, v in module.state_dict().items()}
            for i, s in enumerate(trainer.optimizers[0].state.values()):
                state.update({f"opt.{i}.{k}": v.clone() for k, v in s.items()})
            name = "before" if batch_idx == self.step else "after"
            torch.save(state, Path(self.record) / f"{name}-rank{trainer.global_rank}.pt")
