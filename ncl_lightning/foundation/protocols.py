"""What callbacks, evaluation modules and ``ncl-cli`` may ask of a DataModule beyond Lightning.

Each optional extra is a ``runtime_checkable`` ``typing.Protocol``: a caller that needs one
checks ``isinstance(datamodule, Extra)`` ([`require_extra`][] raises a one-line error
naming the missing extra); a caller that can do without one skips that part. The
DataModules of [`ncl_lightning.data`][] provide them; the protocols sit in the foundation so
that any layer can check for an extra without importing ``data``. [`FiniteCheckHost`][] and
[`FiniteCheck`][] are not DataModule extras: the non-finite guard attaches itself to the
module it guards, and the training step calls what it was given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from ncl_lightning.foundation.errors import ConfigError

Extra = TypeVar("Extra")


def require_extra(
    datamodule: object, extra: type[Extra], user: str, what: str, key: str, hint: str = ""
) -> Extra:
    """``datamodule`` if it has the ``extra`` protocol, else a one-line [`ConfigError`][].

    Args:
        datamodule: The trainer's DataModule (``None`` when there is none).
        extra: One of the protocols of this module.
        user: Who needs it (``"FeatureStatistics(sepin=True)"``), first in the message.
        what: The missing extra in words (``"view_dataloader()"``).
        key: The config key to change (``err.key``).
        hint: Remedy appended to the message (``"set sepin: false"``).
    """
    if not isinstance(datamodule, extra):
        remedy = f" ({hint})" if hint else ""
        raise ConfigError(
            f"{user} needs a DataModule with {what}; {type(datamodule).__name__} has none{remedy}",
            key=key,
        )
    return datamodule


@runtime_checkable
class ChecksInputs(Protocol):
    """Checks, read-only, that a stage can get its data before anything is written."""

    def check_inputs(self, stage: str | None = None, world_size: int = 1) -> None:
        """Raise a [`DataError`][ncl_lightning.foundation.errors.DataError] (or a subclass) naming
        the config key when ``stage`` (``fit``, ``validate``, ``test``, ``predict``,
        ``None``: all) cannot get its data with ``world_size`` ranks."""


@runtime_checkable
class ClassLabels(Protocol):
    """``num_classes``: classes of the int64 labels ``[B]`` of the evaluation batches
    (labels in ``[0, num_classes)``); 0 when the batches carry no class labels (dSprites
    factors, sparse-coding latents). Known at construction, before ``setup``."""

    num_classes: int


@runtime_checkable
class ImageShape(Protocol):
    """The shape ``[C, H, W] = [in_channels, image_size, image_size]`` of the batched
    images, known at construction (the CLI links it into the backbone; the preflight
    check feeds two zero images of that shape through the model)."""

    in_channels: int
    image_size: int


@runtime_checkable
class MultiViewData(Protocol):
    """``n_views``: views per sample of a training batch ``(views, labels)`` (a list of
    ``n_views`` tensors ``[B, ...]``); ``ncl-cli`` compares it with the method's
    ``views_per_image``."""

    n_views: int


@runtime_checkable
class CapturableViews(Protocol):
    """A DataModule whose training views are made on the device can compile their device
    part (``capture_views("reduce-overhead")``: CUDA graphs); a method whose ``step_mode``
    captures the step asks for it at the start of ``fit``."""

    def capture_views(self, mode: str | None) -> None:
        """Compile the device views with ``torch.compile`` ``mode`` (``None``: eager); a
        no-op when the views are made on the CPU."""


@runtime_checkable
class CleanData(Protocol):
    """Clean (non-augmented) evaluation batches ``(x [B, ...], labels [B] or factors
    [B, K])`` of any split, in order, no batch dropped, without ``setup``; rank ``rank``
    of ``world_size`` gets samples ``rank::world_size``."""

    def clean_dataloader(self, split: str, rank: int = 0, world_size: int = 1) -> DataLoader:
        """Clean batches of ``split`` (``train``, ``val``, ``test``)."""

    def clean_train_dataloader(self, rank: int = 0, world_size: int = 1) -> DataLoader:
        """Clean batches of the training split (the kNN monitor's feature bank)."""


@runtime_checkable
class ViewData(Protocol):
    """Augmented ``(views, labels)`` of an evaluation split, in order, ``views`` a list of
    ``n_views`` tensors ``[B, ...]`` that depend only on ``(seed, sample)``: the same at
    every call, with any number of workers, before and after a resume (SEPIN's pairs)."""

    def view_dataloader(self, split: str, rank: int = 0, world_size: int = 1) -> DataLoader:
        """Views of ``split`` (``val`` or ``test``); rank ``rank`` of ``world_size`` gets
        samples ``rank::world_size``."""


@runtime_checkable
class PictureData(Protocol):
    """Images to draw: the evaluation datasets after ``setup`` (items ``(image [C, H, W]
    normalised, label)``, the order of ``val_dataloader``/``test_dataloader``) and the
    ``augmentation`` whose ``mean``/``std`` undo the normalisation."""

    val_dataset: Dataset | None
    test_dataset: Dataset | None
    augmentation: Any


@runtime_checkable
class FactorData(Protocol):
    """Ground-truth factors: evaluation batches carry int64 factor labels ``[B, K]`` and
    ``factor_names`` names the ``K`` columns (dSprites also gives their ``factor_sizes``)."""

    factor_names: Sequence[str]


@runtime_checkable
class MultipleTestSets(Protocol):
    """Several test sets: ``test_dataloader()`` returns one loader per name of
    ``test_names``, in that order; metrics are logged per name."""

    test_names: list[str]


@runtime_checkable
class GroundTruthDictionary(Protocol):
    """Sparse-coding data ``x = M z + ε``: ``dictionary`` is ``M`` ``[p, d]`` (float32,
    column-orthonormal), known at construction."""

    dictionary: Tensor


__all__ = [
    "ChecksInputs",
    "ClassLabels",
    "CleanData",
    "FactorData",
    "GroundTruthDictionary",
    "ImageShape",
    "MultiViewData",
    "MultipleTestSets",
    "PictureData",
    "ViewData",
    "require_extra",
]


@runtime_checkable
class FiniteCheck(Protocol):
    """What a training step calls to judge its loss (the non-finite guard)."""

    def check_loss(self, module: Any, loss: Any) -> bool:
        """Judge at once: ``True`` when finite; otherwise stop (raises) or skip (``False``)."""

    def check_loss_later(self, module: Any, loss: Any) -> bool:
        """Judge on the device, the verdict read at the next batch; ``True`` under a trainer."""

    def after_finite(self, effect: Callable[[], None]) -> None:
        """Run ``effect`` once the batch is known to be finite (dropped if it is not)."""

    def judge_pending(self, module: Any) -> None:
        """Read the deferred verdict now, while the batch's gradients still exist."""


@runtime_checkable
class FiniteCheckHost(Protocol):
    """A module the guard attaches itself to (a ``TrainableModule``)."""

    def attach_finite_check(self, check: FiniteCheck) -> None:
        """Use ``check`` for the training steps run by the module's current trainer."""
