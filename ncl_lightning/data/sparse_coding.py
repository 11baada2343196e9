"""Synthetic sparse-coding data with random-masking views (Pokle et al., AISTATS 2022).

Pokle, Tian, Li, Risteski, "Contrasting the landscape of contrastive and non-contrastive
learning", AISTATS 2022: inputs ``x = M z + ε`` ([`SparseCodingModel`][]) whose two views
are random masks of their coordinates ([`mask_views`][]). The dictionary and samples
come from ``seeded_generator(seed, DATA_KEY, stream)``, a batch's masks from
[`batch_seed`][] of its keys ([`ncl_lightning.data.seeding`][]): exact resume.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import DataLoader

from ncl_lightning.data.seeding import (
    DATA_KEY,
    GeneratedData,
    KeyDataset,
    ResumableLoader,
    batch_seed,
    seeded_generator,
)
from ncl_lightning.data.sparse_latents import (
    Support,
    bernoulli_latents,
    fixed_count_latents,
    paper_nonzero_count,
)
from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.validation import check_at_least, check_choice, check_int, check_range

Latent = Literal["symmetric", "binary"]
ViewScheme = Literal["independent", "dependent"]

# Data drawn at construction: seeded_generator(seed, DATA_KEY, stream).
_DICTIONARY_STREAM, _TRAIN_STREAM, _VAL_STREAM = 0, 1, 2


def random_dictionary(p: int, d: int, generator: torch.Generator | None = None) -> Tensor:
    """Column-orthonormal ``M`` ``[p, d]`` (``MᵀM = I_d``): Q of the QR of a Gaussian matrix.

    The signs are fixed so that ``R`` has a positive diagonal (the unique QR), which makes
    ``M`` independent of the LAPACK backend.

    Args:
        p: Ambient dimension (>= d).
        d: Number of dictionary atoms (>= 1).
        generator: Source of randomness.
    """
    check_int("d", d)
    check_range("d", d, 1, p)
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
    masks; ``"dependent"``: ``(2 D x, 2 (I - D) x)`` with one Bernoulli(``alpha``) mask
    (complementary views, unbiased at the paper's ``alpha = 1/2``). Every row (sample)
    gets its own masks.

    Args:
        x: Inputs ``[..., p]``.
        alpha: Probability that a coordinate is kept (in ``(0, 1)``).
        scheme: ``"independent"`` or ``"dependent"``.
        generator: Source of randomness (on ``x``'s device).

    Returns:
        ``(v_1, v_2)``, each shaped like ``x``.
    """
    check_range("alpha", alpha, 0.0, 1.0, "()")
    check_choice("scheme", scheme, get_args(ViewScheme))
    keep = torch.rand(x.shape, generator=generator, device=x.device) < alpha
    if scheme == "dependent":
        return 2.0 * keep * x, 2.0 * (~keep) * x
    keep_2 = torch.rand(x.shape, generator=generator, device=x.device) < alpha
    return keep * x, keep_2 * x


@dataclass
class SparseCodingModel:
    """The generative model ``x = M z + ε`` of Pokle et al. (AISTATS 2022).

    Latents (``β = nonzero_prob``, ``ncl_lightning.data.sparse_latents``): with
    ``support="bernoulli"`` every entry is non-zero independently with probability ``β``,
    conditioned on at least one non-zero entry, so the expected fraction of non-zero
    entries is ``β / (1 - (1 - β)^d)`` (0.154 at ``β = 0.1``, ``d = 10``): the law Pokle
    et al. state (Sec. 5.2.2, "at least one of the entries is non-zero"). With
    ``support="fixed_count"`` every sample has exactly ``k`` non-zeros at uniformly random
    positions, as in Pokle et al.'s code (``gen_z``): ``k = nonzero_count``, or by default
    their rule ``k = max(⌈dβ⌉, ⌈dβ/2⌉ + 1)`` (2 at ``β = 0.1`` and ``0.2``, 3 at ``0.3``,
    ``d = 10``). Non-zero entries are ``±1`` (``latent="symmetric"``: i.i.d. fair signs
    under ``"bernoulli"``; exactly ``⌈k/2⌉`` of them ``-1`` under ``"fixed_count"``, as the
    authors) or 1 (``"binary"``). See [`expected_nonzero_fraction`][].

    Args:
        p: Input dimension (>= d).
        d: Latent dimension / number of dictionary atoms (>= 1).
        latent: ``"symmetric"`` (±1 entries) or ``"binary"`` ({0, 1} entries).
        nonzero_prob: Probability ``β`` that a latent entry is non-zero, in ``(0, 1]``.
        noise_var: Noise variance ``σ²`` per input entry (>= 0); ``None`` uses
            ``log(d) / d``.
        seed: Seed of the dictionary.
        support: ``"bernoulli"`` (i.i.d. entries) or ``"fixed_count"`` (``k`` per sample).
        nonzero_count: ``k`` for ``"fixed_count"`` (in ``[1, d]``); ``None`` derives it from
            ``nonzero_prob`` by the authors' rule. Only with ``"fixed_count"``.

    Attributes:
        dictionary: Column-orthonormal ``M`` ``[p, d]`` (float32).
    """

    p: int = 50
    d: int = 10
    latent: Latent = "symmetric"
    nonzero_prob: float = 0.1
    noise_var: float | None = None
    seed: int = 0
    support: Support = "bernoulli"
    nonzero_count: int | None = None
    dictionary: Tensor = field(init=False, repr=False)

    def __post_init__(self) -> None:
        check_int("d", self.d)
        check_int("p", self.p, self.d)  # M [p, d] has orthonormal columns
        check_choice("latent", self.latent, get_args(Latent))
        check_range("nonzero_prob", self.nonzero_prob, 0.0, 1.0, "(]")
        if self.noise_var is not None:
            check_at_least("noise_var", self.noise_var, 0.0)
        check_int("seed", self.seed, 0)
        check_choice("support", self.support, get_args(Support))
        if self.nonzero_count is not None and self.support != "fixed_count":
            raise ConfigError(
                f"nonzero_count={self.nonzero_count} needs support='fixed_count' "
                f"(support={self.support!r} draws each entry with nonzero_prob)",
                key="nonzero_count",
            )
        if self.support == "fixed_count":
            check_range("nonzero_count", self.count, 1, self.d)
        generator = seeded_generator(self.seed, DATA_KEY, _DICTIONARY_STREAM)
        self.dictionary = random_dictionary(self.p, self.d, generator)

    @property
    def sigma2(self) -> float:
        """The noise variance in use (``noise_var`` or ``log(d) / d``)."""
        return math.log(self.d) / self.d if self.noise_var is None else self.noise_var

    @property
    def count(self) -> int:
        """Non-zeros per sample under ``"fixed_count"``: ``nonzero_count`` or the authors'
        ``max(⌈dβ⌉, ⌈dβ/2⌉ + 1)``."""
        if self.nonzero_count is not None:
            return self.nonzero_count
        return paper_nonzero_count(self.d, self.nonzero_prob)

    def expected_nonzero_fraction(self) -> float:
        """``E[#non-zeros of z] / d``: ``β / (1 - (1 - β)^d)`` (``"bernoulli"``, under the
        conditioning on ``z ≠ 0``) or ``k / d`` (``"fixed_count"``)."""
        if self.support == "fixed_count":
            return self.count / self.d
        beta = self.nonzero_prob
        return beta / (1.0 - (1.0 - beta) ** self.d)

    def sample_latents(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """``n`` latents ``[n, d]`` (float32), each with at least one non-zero entry."""
        check_int("n", n)
        symmetric = self.latent == "symmetric"
        if self.support == "fixed_count":
            return fixed_count_latents(n, self.d, self.count, symmetric, generator)
        return bernoulli_latents(n, self.d, self.nonzero_prob, symmetric, generator)

    def sample(self, n: int, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """Draw ``n`` samples.

        Returns:
            ``(x [n, p], z [n, d])`` float32, ``x = z Mᵀ + ε``.
        """
        z = self.sample_latents(n, generator)
        noise = torch.randn(n, self.p, generator=generator) * math.sqrt(self.sigma2)
        return z @ self.dictionary.T + noise, z


class MaskBatch:
    """``collate_fn``: the ``(index, sample_seed)`` keys of a batch -> ``([v_1, v_2], z)``
    of ``inputs`` ``[n, p]`` and ``latents`` ``[n, d]``, masked by [`mask_views`][] with a
    generator seeded by [`batch_seed`][] of the keys."""

    def __init__(self, inputs: Tensor, latents: Tensor, alpha: float, views: ViewScheme) -> None:
        self.inputs, self.latents, self.alpha, self.views = inputs, latents, alpha, views

    def __call__(self, keys: Sequence[tuple[int, int]]) -> tuple[list[Tensor], Tensor]:
        index = torch.tensor([key[0] for key in keys])
        generator = seeded_generator(batch_seed(keys))
        x = self.inputs.index_select(0, index)  # index_select: no thread-pool round trip
        v1, v2 = mask_views(x, self.alpha, self.views, generator)
        return [v1, v2], self.latents.index_select(0, index)


class CleanBatch:
    """``collate_fn``: indices of a batch -> clean ``(x [B, p], z [B, d])``."""

    def __init__(self, inputs: Tensor, latents: Tensor) -> None:
        self.inputs, self.latents = inputs, latents

    def __call__(self, keys: Sequence[int]) -> tuple[Tensor, Tensor]:
        index = torch.tensor(list(keys))
        return self.inputs.index_select(0, index), self.latents.index_select(0, index)


class SparseCodingDataModule(GeneratedData, L.LightningDataModule):
    """Sparse-coding vectors with random-masking views (Pokle et al., AISTATS 2022).

    The dictionary and the training / validation samples are fixed at construction
    (deterministic under ``seed``; ``n × p`` floats), so ``dictionary``,
    ``train_latents`` and ``val_latents`` are available to metrics before ``setup``.
    Training views are re-masked for every batch from ``(seed, epoch, the batch's
    samples)`` (see the module docstring). Data load in the main process: a batch is
    indexed at once (no per-sample Python calls).

    Args:
        n: Training samples.
        p: Input dimension (>= d).
        d: Latent dimension (>= 1).
        latent: ``"symmetric"`` (±1 latents) or ``"binary"`` ({0, 1} latents).
        nonzero_prob: Probability ``β`` that a latent entry is non-zero, in ``(0, 1]``.
        noise_var: Noise variance per input entry (>= 0); ``None`` uses ``log(d) / d``.
        support: ``"bernoulli"`` (i.i.d. non-zeros given at least one, the paper's text,
            Sec. 5.2.2 and its footnote; the default and the paper configs') or
            ``"fixed_count"`` (exactly ``k`` non-zeros per sample, the generator of
            Pokle et al.'s code).
        nonzero_count: ``k`` of ``"fixed_count"``; ``None``: the authors' rule from
            ``nonzero_prob`` (2 at 0.1 and 0.2, 3 at 0.3 for ``d = 10``).
        alpha: Probability that a coordinate survives a mask, in ``(0, 1)``.
        views: ``"independent"`` (``D_1 x, D_2 x``) or ``"dependent"``
            (``2 D x, 2 (I - D) x``).
        batch_size: Samples per batch (<= n).
        val_n: Validation samples.
        seed: Seed of the dictionary, the samples and the masks (>= 0).

    Attributes:
        num_classes: 0 (no labels; batches carry the latents ``z``).
        n_views: 2 (the two masked views).
        in_dim: Input dimension ``p``.
        model: The [`SparseCodingModel`][].
        dictionary: ``M`` ``[p, d]``.
        train_inputs / train_latents: ``[n, p]`` / ``[n, d]`` noisy inputs and latents.
        val_inputs / val_latents: ``[val_n, p]`` / ``[val_n, d]``.
    """

    num_classes: int = 0
    size_key = "n"
    n_views: int = 2

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
        support: Support = "bernoulli",
        nonzero_count: int | None = None,
    ) -> None:
        super().__init__()
        check_int("n", n)
        check_int("val_n", val_n)
        check_range("batch_size", batch_size, 1, n)
        check_range("alpha", alpha, 0.0, 1.0, "()")
        check_choice("views", views, get_args(ViewScheme))
        self.model = SparseCodingModel(
            p, d, latent, nonzero_prob, noise_var, seed, support, nonzero_count
        )
        self.save_hyperparameters()
        self.n, self.p, self.d, self.val_n = n, p, d, val_n
        self.alpha, self.views, self.batch_size = alpha, views, batch_size
        self.seed: int | None = seed  # the training data's seed, kept in checkpoints
        self.resumed = (0, 0)  # (epoch, batches done) of the checkpoint resumed from
        self.in_dim = p
        self.dictionary = self.model.dictionary
        self.train_inputs, self.train_latents = self.model.sample(
            n, seeded_generator(seed, DATA_KEY, _TRAIN_STREAM)
        )
        self.val_inputs, self.val_latents = self.model.sample(
            val_n, seeded_generator(seed, DATA_KEY, _VAL_STREAM)
        )

    def train_dataloader(self) -> DataLoader:
        """Shuffled ``([v_1, v_2], z)``: views ``[B, p]``, latents ``[B, d]``."""
        keys = KeyDataset(self.n)
        return ResumableLoader(
            keys,
            batch_size=self.batch_size,
            sampler=self.train_sampler(keys),
            drop_last=True,
            collate_fn=MaskBatch(self.train_inputs, self.train_latents, self.alpha, self.views),
            generator=seeded_generator(self.seed or 0),  # private: global untouched
        )

    def val_dataloader(self) -> DataLoader:
        """Clean ``(x [B, p], z [B, d])`` of the validation samples, in order."""
        return DataLoader(
            KeyDataset(self.val_n),
            batch_size=self.batch_size,
            collate_fn=CleanBatch(self.val_inputs, self.val_latents),
            generator=seeded_generator(self.seed or 0),  # private: global untouched
        )
