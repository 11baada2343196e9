"""Dictionary recovery of a linear encoder (Pokle et al., AISTATS 2022) as a Metric.

The state is the latest encoder weight, not a sum over batches: the metric describes
the model, not the data. See ``functional.dictionary_recovery`` for the maths.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

from ncl_lightning.foundation.errors import EmptyMetricError
from ncl_lightning.metrics.functional.dictionary import (
    check_dictionary,
    check_weight_dictionary,
    dictionary_recovery,
)


class DictionaryRecovery(Metric):
    """Max / median / min over atoms of ``s_j = max_i |cos(W_i, M_j)|``.

    ``update(weight)`` stores the latest encoder weight (each call replaces the previous
    one); ``compute()`` scores it against the dictionary. The dictionary is a
    non-persistent buffer (moved with the metric, not saved in checkpoints, not reset).

    Distributed: all ranks hold the same (DDP-synchronised) weight, so the state is
    reduced by ``"mean"``, which returns that weight. ``full_state_update = True`` so that
    ``forward`` keeps the latest weight (the fast path would average the weights of
    successive updates).

    Args:
        dictionary: Dictionary ``M`` ``[p, d]`` (columns are the atoms).

    Update:
        ``weight``: encoder weight ``W`` ``[m, p]``.
    """

    higher_is_better = True
    is_differentiable = False
    full_state_update = True

    dictionary: Tensor
    weight: Tensor

    def __init__(self, dictionary: Tensor, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        check_dictionary(dictionary)
        dictionary = dictionary.detach().float().clone()
        self.register_buffer("dictionary", dictionary, persistent=False)
        self.add_state("weight", torch.zeros(0, dictionary.shape[0]), dist_reduce_fx="mean")

    def update(self, weight: Tensor) -> None:
        """Store the encoder weight ``[m, p]`` (replacing the previous one)."""
        check_weight_dictionary(weight, self.dictionary)
        self.weight = weight.detach().to(device=self.dictionary.device, dtype=torch.float32)

    def compute(self) -> dict[str, Tensor]:
        """``{"max", "median", "min"}`` scalar tensors in ``[0, 1]``."""
        if self.weight.numel() == 0:
            raise EmptyMetricError("DictionaryRecovery.compute() called before update(weight)")
        return dictionary_recovery(self.weight, self.dictionary)
