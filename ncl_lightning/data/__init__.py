"""LightningDataModules yielding multi-view batches, and SimCLR-style augmentations.

Every DataModule yields ``(views, labels)`` for training (``views``: ``n_views`` float
tensors ``[B, C, H, W]``) and clean ``(images, labels)`` for validation/test, and sets
``num_classes``, ``in_channels`` and ``image_size`` at construction.
"""

from ncl_lightning.data.base import MultiViewDataModule, Split
from ncl_lightning.data.batch_augmentation import BatchAugmentation, sample_view_params
from ncl_lightning.data.cifar import CIFAR10DataModule, CIFAR100DataModule
from ncl_lightning.data.digits import DigitsDataModule
from ncl_lightning.data.dsprites import (
    DSPRITES_FACTOR_NAMES,
    DSPRITES_FACTOR_SIZES,
    DSpritesDataModule,
    DSpritesDataset,
    render_sprites,
)
from ncl_lightning.data.folder import ImageFolderDataModule, ImageListDataset
from ncl_lightning.data.held import HeldIndices, HeldOnDeviceDataModule
from ncl_lightning.data.imagenet100 import ImageNet100DataModule, load_imagenet100_classes
from ncl_lightning.data.memory import DecodedImages, TensorImageDataset, decode_images
from ncl_lightning.data.ood import (
    IMAGENET_C_CORRUPTIONS,
    IMAGENET_C_EXTRA_CORRUPTIONS,
    IMAGENET_C_SEVERITIES,
    ImageNetOODDataModule,
)
from ncl_lightning.data.seeding import TransformedDataset
from ncl_lightning.data.sparse_coding import SparseCodingDataModule, SparseCodingModel, mask_views
from ncl_lightning.data.sprite_augmentation import SpriteAugmentation
from ncl_lightning.data.sprite_simclr import SimCLRSpriteViews, sprite_simclr_augmentation
from ncl_lightning.data.transforms import (
    AUGMENTATIONS,
    CIFAR100_MEAN,
    CIFAR100_STD,
    CIFAR_MEAN,
    CIFAR_STD,
    DIGITS_MEAN,
    DIGITS_STD,
    IMAGENET_MEAN,
    IMAGENET_STD,
    MultiView,
    SimCLRAugmentation,
    cifar100_augmentation,
    cifar_augmentation,
    digits_augmentation,
    imagenet_augmentation,
    scaled_augmentation,
)

__all__ = [
    "AUGMENTATIONS",
    "CIFAR100_MEAN",
    "CIFAR100_STD",
    "CIFAR_MEAN",
    "CIFAR_STD",
    "DIGITS_MEAN",
    "DIGITS_STD",
    "DSPRITES_FACTOR_NAMES",
    "DSPRITES_FACTOR_SIZES",
    "IMAGENET_C_CORRUPTIONS",
    "IMAGENET_C_EXTRA_CORRUPTIONS",
    "IMAGENET_C_SEVERITIES",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "BatchAugmentation",
    "CIFAR10DataModule",
    "CIFAR100DataModule",
    "DSpritesDataModule",
    "DSpritesDataset",
    "DecodedImages",
    "DigitsDataModule",
    "HeldIndices",
    "HeldOnDeviceDataModule",
    "ImageFolderDataModule",
    "ImageListDataset",
    "ImageNet100DataModule",
    "ImageNetOODDataModule",
    "MultiView",
    "MultiViewDataModule",
    "SimCLRAugmentation",
    "SimCLRSpriteViews",
    "SparseCodingDataModule",
    "SparseCodingModel",
    "Split",
    "SpriteAugmentation",
    "TensorImageDataset",
    "TransformedDataset",
    "cifar100_augmentation",
    "cifar_augmentation",
    "decode_images",
    "digits_augmentation",
    "imagenet_augmentation",
    "load_imagenet100_classes",
    "mask_views",
    "render_sprites",
    "sample_view_params",
    "scaled_augmentation",
    "sprite_simclr_augmentation",
]
