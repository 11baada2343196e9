"""Synthetic sparse-coding data with random-masking views (Pokle et al., AISTATS 2022).

Pokle, Tian, Li, Risteski, "Contrasting the landscape of contrastive and non-contrastive
learning", AISTATS 2022: inputs follow the sparse coding model ``x = M z + ε`` with a
column-orthonormal dictionary ``M`` ``[p, d]``, a sparse latent ``z ∈ R^d`` and Gaussian
noise ``ε ~ N(0, σ² I_p)`` (``σ² = log(d) / d`` by default). The two views of ``x`` are
random masks of its coordinates:

* ``"independent"``: ``v_1 = D_1 x``, ``v_2 = D_2 x`` with independent diagonal
  ``D_i`` whose entries are Bernoulli(``α``);
* ``"dependent"``: ``v_1 = 2 D x``, ``v_2 = 2 (I - D) x`` with one Bernoulli(``α``) mask
  ``D`` (complementary views; the factor 2 makes them unbiased at the paper's ``α = 1/2``).

Batches of ``SparseCodingDataModule``:
    * ``train_dataloader``: ``(views, z)``, ``views`` a list ``[v_1, v_2]`` of float
      tensors ``[B, p]`` (masks drawn afresh for every batch, reproducibly), ``z`` the
      latents ``[B, d]``; shuffled, last incomplete batch dropped.
    * ``val_dataloader``: clean ``(x [B, p], z [B, d])`` in order, no batch dropped.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    RandomSampler,
    Sampler,
    SequentialSampler,
    TensorDataset,
)

from ncl_lightning.data.base import check_train_batches
from ncl_lightning.runtime.errors import ConfigError

Latent = Literal["symmetric", "binary"]
ViewScheme = Literal["independent", "dependent"]

# Independent random streams derived from one seed (see ``_generator``).
_TRAIN_STREAM, _VAL_STREAM, _MASK_STREAM, _SHUFFLE_STREAM = 1, 2, 3, 4
_STREAMS = 8


def _generator(seed: int, stream: int = 0, rank: int = 0) -> torch.Generator:
    """A CPU generator for ``(seed, stream, rank)``; distinct triples get distinct seeds."""
    return torch.Generator().manual_seed((seed * 1024 + rank) * _STREAMS + stream)


def _identity(batch: Any) -> Any:
    return batch


def _check_choice(name: str, value: str, choices: object) -> None:
    options = list(get_args(choices))
    if value not in options:
        raise ValueError(f"{name} must be one of {options}, got {value!r}")


def default_noise_var(d: int) -> float:
    """The paper's default noise variance ``σ² = log(d) / d`` (0 for ``d = 1``)."""
    return math.log(d) / d


def random_dictionary(p: int, d: int, generator: torch.Generator | None = None) -> Tensor:
    """Column-orthonormal ``M`` ``[p, d]`` (``MᵀM = I_d``): Q of the QR of a Gaussian matrix.

    The signs are fixed so that ``R`` has a positive diagonal (the unique QR), which makes
    ``M`` independent of the LAPACK backend.

    Args:
        p: Ambient dimension (>= d).
        d: Number of dictionary atoms (>= 1).
        generator: Source of randomness.
    """
    if not 1 <= d <= p:
        raise ValueError(f"need 1 <= d <= p, got d={d}, p={p}")
    gaussian = torch.randn(p, d, generator=generator, dtype=torch.float64)
    q, r = torch.linalg.qr(gaussian, mode="reduced")
    signs = torch.sign(torch.diagonal(r))
    signs[signs == 0] = 1.0
    return (q * signs).float()


def mask_views(
    x: Tensor,
    alpha: float = 0.5,
    scheme: ViewScheme = "independent",
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """Two random-masking views of ``x`` (Pokle et al., 2022).

    ``"independent"``: ``(D_1 x, D_2 x)`` with independent Bernoulli(``alpha``) diagonal
    masks; ``"dependent"``: ``(2 D x, 2 (I - D) x)`` with one Bernoulli(``alpha``) mask.
    Every row (sample) gets its own masks.

    Args:
        x: Inputs ``[..., p]``.
        alpha: Probability that a coordinate is kept (in ``(0, 1)``).
        scheme: ``"independent"`` or ``"dependent"``.
        generator: Source of randomness (on ``x``'s device).

    Returns:
        ``(v_1, v_2)``, each shaped like ``x``.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    _check_choice("scheme", scheme, ViewScheme)
    keep = torch.rand(x.shape, generator=generator, device=x.device) < alpha
    if scheme == "dependent":
        return 2.0 * keep * x, 2.0 * (~keep) * x
    keep_2 = torch.rand(x.shape, generator=generator, device=x.device) < alpha
    return keep * x, keep_2 * x


@dataclass
class SparseCodingModel:
    """The generative model ``x = M z + ε`` of Pokle et al. (AISTATS 2022).

    Latents: with ``latent="symmetric"`` each entry of ``z`` is ``+1`` or ``-1`` with
    probability ``β / 2`` each and 0 otherwise; with ``"binary"`` it is 1 with probability
    ``β`` and 0 otherwise (``β = nonzero_prob``). Samples with ``z = 0`` carry no signal,
    so ``z`` is drawn *conditioned on at least one non-zero entry* (exactly, without a
    rejection loop: the index of the first non-zero entry is drawn from its truncated
    geometric law, the later entries independently). The expected fraction of non-zero
    entries is therefore ``β / (1 - (1 - β)^d)`` (0.154 at the defaults ``β = 0.1``,
    ``d = 10``), see :meth:`expected_nonzero_fraction`.

    Args:
        p: Input dimension (>= d).
        d: Latent dimension / number of dictionary atoms (>= 1).
        latent: ``"symmetric"`` (±1 entries) or ``"binary"`` ({0, 1} entries).
        nonzero_prob: Probability ``β`` that a latent entry is non-zero, in ``(0, 1]``.
        noise_var: Noise variance ``σ²`` per input entry (>= 0); ``None`` uses
            ``log(d) / d``.
        seed: Seed of the dictionary.

    Attributes:
        dictionary: Column-orthonormal ``M`` ``[p, d]`` (float32).
    """

    p: int = 50
    d: int = 10
    latent: Latent = "symmetric"
    nonzero_prob: float = 0.1
    noise_var: float | None = None
    seed: int = 0
    dictionary: Tensor = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.d < 1:
            raise ValueError(f"d must be >= 1, got {self.d}")
        if self.p < self.d:
            raise ValueError(f"p must be >= d (a column-orthonormal M), got p={self.p}, d={self.d}")
        _check_choice("latent", self.latent, Latent)
        if not 0.0 < self.nonzero_prob <= 1.0:
            raise ValueError(f"nonzero_prob must be in (0, 1], got {self.nonzero_prob}")
        if self.noise_var is not None and self.noise_var < 0.0:
            raise ValueError(f"noise_var must be >= 0 or None, got {self.noise_var}")
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")
        self.dictionary = random_dictionary(self.p, self.d, _generator(self.seed))

    @property
    def sigma2(self) -> float:
        """The noise variance in use (``noise_var`` or ``log(d) / d``)."""
        return default_noise_var(self.d) if self.noise_var is None else self.noise_var

    def expected_nonzero_fraction(self) -> float:
        """``E[#non-zeros of z] / d = β / (1 - (1 - β)^d)`` under the conditioning."""
        beta = self.nonzero_prob
        return beta / (1.0 - (1.0 - beta) ** self.d)

    def sample_latents(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """``n`` latents ``[n, d]`` (float32), each with at least one non-zero entry."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        beta, d = self.nonzero_prob, self.d
        # First non-zero index k: P(k) ∝ (1 - β)^k β, k < d (the law given z ≠ 0).
        first_probs = (1.0 - beta) ** torch.arange(d, dtype=torch.float64)
        first = torch.multinomial(first_probs, n, replacement=True, generator=generator)
        later = torch.rand(n, d, generator=generator) < beta
        index = torch.arange(d)
        support = ((index > first[:, None]) & later) | (index == first[:, None])
        z = support.float()
        if self.latent == "symmetric":
            signs = torch.randint(0, 2, (n, d), generator=generator).float() * 2.0 - 1.0
            z = z * signs
        return z

    def sample(self, n: int, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """Draw ``n`` samples.

        Returns:
            ``(x [n, p], z [n, d])`` float32, ``x = z Mᵀ + ε``.
        """
        z = self.sample_latents(n, generator)
        noise = torch.randn(n, self.p, generator=generator) * math.sqrt(self.sigma2)
        return z @ self.dictionary.T + noise, z


class SparseCodingDataModule(L.LightningDataModule):
    """Sparse-coding vectors with random-masking views (Pokle et al., AISTATS 2022).

    The dictionary and the training / validation samples are fixed at construction
    (deterministic under ``seed``; ``n × p`` floats), so ``dictionary``,
    ``train_latents`` and ``val_latents`` are available to metrics before ``setup``.
    Training views are re-masked for every batch by a generator seeded at ``setup`` from
    ``(seed, global rank)``, so runs are reproducible. Data load in the main process (the
    mask generator must not be copied into workers).

    Args:
        n: Training samples.
        p: Input dimension (>= d).
        d: Latent dimension (>= 1).
        latent: ``"symmetric"`` (±1 latents) or ``"binary"`` ({0, 1} latents).
        nonzero_prob: Probability ``β`` that a latent entry is non-zero, in ``(0, 1]``.
        noise_var: Noise variance per input entry (>= 0); ``None`` uses ``log(d) / d``.
        alpha: Probability that a coordinate survives a mask, in ``(0, 1)``.
        views: ``"independent"`` (``D_1 x, D_2 x``) or ``"dependent"``
            (``2 D x, 2 (I - D) x``).
        batch_size: Samples per batch (<= n).
        val_n: Validation samples.
        seed: Seed of the dictionary, the samples and the masks (>= 0).

    Attributes:
        num_classes: 0 (no labels; batches carry the latents ``z``).
        in_dim: Input dimension ``p``.
        model: The :class:`SparseCodingModel`.
        dictionary: ``M`` ``[p, d]``.
        train_inputs / train_latents: ``[n, p]`` / ``[n, d]`` noisy inputs and latents.
        val_inputs / val_latents: ``[val_n, p]`` / ``[val_n, d]``.
    """

    num_classes: int = 0

    def __init__(
        self,
        n: int = 1000,
        p: int = 50,
        d: int = 10,
        latent: Latent = "symmetric",
        nonzero_prob: float = 0.1,
        noise_var: float | None = None,
        alpha: float = 0.5,
        views: ViewScheme = "independent",
        batch_size: int = 100,
        val_n: int = 1000,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if n < 1:
            raise ConfigError(f"n must be >= 1, got {n}")
        if val_n < 1:
            raise ConfigError(f"val_n must be >= 1, got {val_n}")
        if not 1 <= batch_size <= n:
            raise ConfigError(f"batch_size must be in [1, n={n}], got {batch_size}")
        if not 0.0 < alpha < 1.0:
            raise ConfigError(f"alpha must be in (0, 1), got {alpha}")
        _check_choice("views", views, ViewScheme)
        self.model = SparseCodingModel(p, d, latent, nonzero_prob, noise_var, seed)
        self.save_hyperparameters()
        self.n, self.p, self.d, self.val_n = n, p, d, val_n
        self.alpha, self.views, self.batch_size, self.seed = alpha, views, batch_size, seed
        self.in_dim = p
        self.dictionary = self.model.dictionary
        self.train_inputs, self.train_latents = self.model.sample(
            n, _generator(seed, _TRAIN_STREAM)
        )
        self.val_inputs, self.val_latents = self.model.sample(val_n, _generator(seed, _VAL_STREAM))
        self._mask_generator: torch.Generator | None = None
        self._shuffle_generator: torch.Generator | None = None

    def check_inputs(self, stage: str | None = None, world_size: int = 1) -> None:
        """Check that every rank gets one training batch (generated data: no files).

        Raises:
            DataError: ``n // world_size < batch_size`` when fitting.
        """
        if stage in ("fit", None):
            hint = " or raise data.init_args.n"
            check_train_batches(self.n, world_size, self.batch_size, True, hint)

    def setup(self, stage: str | None = None) -> None:
        """(Re)seed the mask and shuffle generators from ``(seed, global rank)``."""
        self.check_inputs(stage, self.trainer.world_size if self.trainer is not None else 1)
        rank = self.trainer.global_rank if self.trainer is not None else 0
        self._mask_generator = _generator(self.seed, _MASK_STREAM, rank)
        self._shuffle_generator = _generator(self.seed, _SHUFFLE_STREAM, rank)

    def _views(self, batch: tuple[Tensor, Tensor]) -> tuple[list[Tensor], Tensor]:
        x, z = batch
        v1, v2 = mask_views(x, self.alpha, self.views, self._mask_generator)
        return [v1, v2], z

    @staticmethod
    def _batched(
        dataset: TensorDataset,
        sampler: Sampler,
        batch_size: int,
        drop_last: bool,
        collate_fn: Callable[[tuple[Tensor, Tensor]], Any] | None = None,
        generator: torch.Generator | None = None,
    ) -> DataLoader:
        """Index whole batches at once (``dataset[indices]``): no per-sample Python calls."""
        return DataLoader(
            dataset,
            batch_size=None,
            sampler=BatchSampler(sampler, batch_size, drop_last),
            collate_fn=collate_fn or _identity,
            generator=generator,
        )

    def train_dataloader(self) -> DataLoader:
        """Shuffled ``([v_1, v_2], z)``: views ``[B, p]``, latents ``[B, d]``."""
        if self._mask_generator is None:
            raise RuntimeError("mask generator is not seeded; call setup() first")
        dataset = TensorDataset(self.train_inputs, self.train_latents)
        sampler = RandomSampler(dataset, generator=self._shuffle_generator)
        return self._batched(
            dataset, sampler, self.batch_size, True, self._views, self._shuffle_generator
        )

    def val_dataloader(self) -> DataLoader:
        """Clean ``(x [B, p], z [B, d])`` of the validation samples, in order."""
        dataset = TensorDataset(self.val_inputs, self.val_latents)
        return self._batched(dataset, SequentialSampler(dataset), self.batch_size, False)
