"""Online evaluation during pre-training: a linear probe and a weighted kNN classifier.

Both read *detached* backbone features, so they measure the representation without
changing it. The probe trains on the augmented first view of each training batch
(solo-learn's online evaluation); the kNN bank holds the training features of the current
epoch, gathered from every rank, and classifies the clean validation images (weighted
cosine kNN of Wu et al., 2018).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.metrics.functional.knn import check_knn_arguments, weighted_knn_predict
from ncl_lightning.nn.gather import gather_no_grad


class OnlineEvaluator(nn.Module):
    """Linear probe head plus a kNN feature bank.

    Args:
        in_dim: Backbone feature width.
        num_classes: Number of classes (> 0).
        knn_k: Neighbours for the kNN classifier.
        knn_temperature: Temperature of the kNN similarity weights.
    """

    def __init__(self, in_dim: int, num_classes: int, knn_k: int, knn_temperature: float) -> None:
        super().__init__()
        if num_classes < 1:
            raise ConfigError(f"online evaluation needs num_classes >= 1, got {num_classes}")
        check_knn_arguments(knn_k, knn_temperature, prefix="knn_")
        self.probe = nn.Linear(in_dim, num_classes)
        self.num_classes = num_classes
        self.knn_k = knn_k
        self.knn_temperature = knn_temperature
        self._bank: list[Tensor] = []
        self._bank_labels: list[Tensor] = []
        self._gathered: tuple[Tensor, Tensor] | None = None

    def probe_loss(self, h: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        """Cross entropy of the probe on detached features; returns ``(loss, logits [B, C])``."""
        logits = self.probe(h.detach())
        return F.cross_entropy(logits, y), logits

    def logits(self, h: Tensor) -> Tensor:
        """Probe logits ``[B, C]`` for features ``h`` ``[B, D]``."""
        return self.probe(h.detach())

    def reset_bank(self) -> None:
        """Forget the bank (called at the start of each training epoch)."""
        self._bank, self._bank_labels, self._gathered = [], [], None

    @torch.no_grad()
    def add_to_bank(self, h: Tensor, y: Tensor) -> None:
        """Store L2-normalised training features ``[B, D]`` and labels ``[B]``."""
        self._bank.append(F.normalize(h.detach().float(), dim=1))
        self._bank_labels.append(y.detach())
        self._gathered = None

    @torch.no_grad()
    def gather_bank(self) -> bool:
        """Collect the bank from every rank; False when it is empty (e.g. sanity check)."""
        if not self._bank:
            self._gathered = None
            return False
        self._gathered = (
            gather_no_grad(torch.cat(self._bank)),
            gather_no_grad(torch.cat(self._bank_labels)),
        )
        return True

    @torch.no_grad()
    def knn_scores(self, h: Tensor) -> Tensor | None:
        """kNN class scores ``[B, C]`` for features ``[B, D]``, or None without a bank."""
        if self._gathered is None:
            return None
        bank, labels = self._gathered
        return weighted_knn_predict(
            F.normalize(h.float(), dim=1),
            bank,
            labels,
            self.num_classes,
            self.knn_k,
            self.knn_temperature,
        )
