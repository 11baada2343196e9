"""Frozen-feature helpers of the offline protocols: extraction and a linear probe fit.

Feature selection and transfer sweep many subsets of dimensions, so they train their
linear classifiers on features computed once (a convex problem; fast even on a CPU)
rather than re-encoding augmented images for every subset.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch
import torch.nn.functional as F
from torch import Tensor

from ncl_lightning.foundation.errors import ConfigError, DataError
from ncl_lightning.foundation.validation import check_at_least
from ncl_lightning.nn.gather import gather_uneven


@torch.no_grad()
def extract_features(
    encode: Callable[[Tensor], Tensor], loader: Iterable, device: torch.device | str = "cpu"
) -> tuple[Tensor, Tensor]:
    """Encode every ``(images, labels)`` batch of ``loader`` and gather over ranks.

    Args:
        encode: Images ``[B, C, H, W]`` to features ``[B, d]``.
        loader: Batches of ``(images, labels)`` (this rank's shard under DDP).
        device: Where the images go before encoding.

    Returns:
        Features ``[N, d]`` (float32, on ``device``) and labels ``[N]`` of all ranks.
    """
    feats, labels = [], []
    for x, y in loader:
        feats.append(encode(x.to(device)).float())
        labels.append(y.to(device))
    if not feats:
        raise DataError("no batches to extract features from (empty split?)")
    return gather_uneven(torch.cat(feats)), gather_uneven(torch.cat(labels))


def fit_linear_probe(
    x: Tensor,
    y: Tensor,
    num_classes: int,
    epochs: int = 100,
    lr: float = 0.1,
    weight_decay: float = 0.0,
    batch_size: int = 256,
    seed: int = 0,
) -> Callable[[Tensor], Tensor]:
    """Train a linear classifier on fixed features; return ``predict(x) -> logits``.

    Features are standardised with the training mean and standard deviation; the
    weights start at zero and are trained with SGD (momentum 0.9, cosine schedule over
    all steps) on cross entropy, in a seeded order, so the fit is deterministic.

    Args:
        x: Training features ``[N, d]``.
        y: Labels ``[N]`` in ``[0, num_classes)``.
        num_classes: Number of classes ``C``.
        epochs: Passes over the data.
        lr: Peak learning rate.
        weight_decay: L2 penalty on the weights.
        batch_size: Samples per step.
        seed: Seed of the shuffling.

    Returns:
        A function mapping features ``[M, d]`` to logits ``[M, C]``.
    """
    if x.ndim != 2 or y.shape != (x.shape[0],):
        raise ConfigError(
            f"need features [N, d] and labels [N], got {tuple(x.shape)}, {tuple(y.shape)}",
            key="x",
        )
    check_at_least("epochs", epochs, 1)
    check_at_least("batch_size", batch_size, 1)
    # Lightning evaluates under inference mode; the fit needs autograd on ordinary tensors.
    with torch.inference_mode(False), torch.enable_grad():
        x, y = x.float().clone(), y.clone()
        mean, std = x.mean(0), x.std(0).clamp_min(1e-6)
        xs = (x - mean) / std
        weight = torch.zeros(num_classes, x.shape[1], device=x.device, requires_grad=True)
        bias = torch.zeros(num_classes, device=x.device, requires_grad=True)
        opt = torch.optim.SGD([weight, bias], lr=lr, momentum=0.9)
        total = epochs * math.ceil(len(xs) / batch_size)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, total)
        gen = torch.Generator().manual_seed(seed)
        for _ in range(epochs):
            order = torch.randperm(len(xs), generator=gen).to(x.device)
            for idx in order.split(batch_size):
                loss = F.cross_entropy(xs[idx] @ weight.T + bias, y[idx])
                loss = loss + weight_decay * weight.pow(2).sum() / 2
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                sched.step()
    weight, bias = weight.detach(), bias.detach()

    def predict(features: Tensor) -> Tensor:
        return ((features.float() - mean) / std) @ weight.T + bias

    return predict


def probe_accuracy(
    train: tuple[Tensor, Tensor], test: tuple[Tensor, Tensor], num_classes: int, **fit_kwargs
) -> float:
    """Top-1 accuracy on ``test`` of [`fit_linear_probe`][] trained on ``train``."""
    predict = fit_linear_probe(*train, num_classes, **fit_kwargs)
    x, y = test
    return (predict(x).argmax(1) == y).float().mean().item()
