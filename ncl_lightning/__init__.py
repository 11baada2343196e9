"""ncl_lightning: interpretable self-supervised learning with PyTorch Lightning.

The public API is importable from the top level (``docs/python.md`` lists it)::

    import lightning as L
    from ncl_lightning import NCL, DigitsDataModule, SmallCNN

    trainer = L.Trainer(max_epochs=5, accelerator="cpu")
    trainer.fit(NCL(SmallCNN(in_channels=1)), DigitsDataModule())

The names are imported lazily (PEP 562): ``import ncl_lightning`` loads neither torch nor
Lightning, so ``ncl-cli --help`` starts fast; the first use of a name imports its module.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Module -> the public names it gives the top level.
_PUBLIC: dict[str, tuple[str, ...]] = {
    "ncl_lightning.methods": (
        "BYOL", "CL", "NCL", "BayesNCL", "Classifier", "Encoded", "NCEClassifier", "NCLTopK",
        "SSLMethod", "SimSiam", "SupConCL", "SupConNCL", "TrainableModule",
    ),
    "ncl_lightning.data": (
        "CIFAR10DataModule", "CIFAR100DataModule", "DSpritesDataModule", "DigitsDataModule",
        "ImageFolderDataModule", "ImageNet100DataModule", "ImageNetOODDataModule",
        "MultiViewDataModule", "SimCLRAugmentation", "SparseCodingDataModule",
    ),
    "ncl_lightning.callbacks": (
        "DictionaryRecoveryMonitor", "Disentanglement", "EncoderNormalization",
        "FeatureStatistics", "OODReport", "TopActivations", "WarmStart",
    ),
    "ncl_lightning.atlas": ("FeatureAtlas", "build_atlas", "read_atlas"),
    "ncl_lightning.nn": (
        "MLP", "LinearClassifier", "ResNet", "SmallCNN", "SparseCodingEncoder", "SpriteEncoder",
    ),
    "ncl_lightning.nn.backbones": ("resnet18", "resnet34", "resnet50"),
    "ncl_lightning.nn.protocols": ("Backbone",),
    "ncl_lightning.evaluation": (
        "FeatureSelection", "FineTune", "KNNClassifier", "LinearProbe", "extract_features",
        "fit_linear_probe", "probe_accuracy",
    ),
    "ncl_lightning.metrics": (
        "SEPIN", "ActiveDimensions", "EffectiveRank", "ExpectedActivation", "FeatureProfile",
        "MutualInformationGap", "SemanticConsistency", "Sparsity",
    ),
    "ncl_lightning.optim": ("LARS", "scale_lr", "warmup_cosine"),
    "ncl_lightning.checkpoints.load": ("CheckpointError", "load_backbone", "load_method"),
    "ncl_lightning.checkpoints.export": ("export_backbone",),
    "ncl_lightning.methods.trainable": ("default_callbacks",),
    "ncl_lightning.foundation.errors": ("ConfigError", "DataError", "NCLError"),
}  # fmt: skip

_MODULE_OF: dict[str, str] = {name: module for module, names in _PUBLIC.items() for name in names}

__all__ = [  # the names of _PUBLIC and __version__ (a test keeps them equal)
    "BYOL",
    "CL",
    "LARS",
    "MLP",
    "NCL",
    "SEPIN",
    "ActiveDimensions",
    "Backbone",
    "BayesNCL",
    "CIFAR10DataModule",
    "CIFAR100DataModule",
    "CheckpointError",
    "Classifier",
    "ConfigError",
    "DSpritesDataModule",
    "DataError",
    "DictionaryRecoveryMonitor",
    "DigitsDataModule",
    "Disentanglement",
    "EffectiveRank",
    "Encoded",
    "EncoderNormalization",
    "ExpectedActivation",
    "FeatureAtlas",
    "FeatureProfile",
    "FeatureSelection",
    "FeatureStatistics",
    "FineTune",
    "ImageFolderDataModule",
    "ImageNet100DataModule",
    "ImageNetOODDataModule",
    "KNNClassifier",
    "LinearClassifier",
    "LinearProbe",
    "MultiViewDataModule",
    "MutualInformationGap",
    "NCEClassifier",
    "NCLError",
    "NCLTopK",
    "OODReport",
    "ResNet",
    "SSLMethod",
    "SemanticConsistency",
    "SimCLRAugmentation",
    "SimSiam",
    "SmallCNN",
    "SparseCodingDataModule",
    "SparseCodingEncoder",
    "Sparsity",
    "SpriteEncoder",
    "SupConCL",
    "SupConNCL",
    "TopActivations",
    "TrainableModule",
    "WarmStart",
    "__version__",
    "build_atlas",
    "default_callbacks",
    "export_backbone",
    "extract_features",
    "fit_linear_probe",
    "load_backbone",
    "load_method",
    "probe_accuracy",
    "read_atlas",
    "resnet18",
    "resnet34",
    "resnet50",
    "scale_lr",
    "warmup_cosine",
]


def __getattr__(name: str) -> Any:
    """Import the module that defines a public ``name`` on its first use (PEP 562)."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'ncl_lightning' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # what type checkers and IDEs see; kept equal to _PUBLIC by a test
    from ncl_lightning.atlas import FeatureAtlas, build_atlas, read_atlas
    from ncl_lightning.callbacks import (
        DictionaryRecoveryMonitor,
        Disentanglement,
        EncoderNormalization,
        FeatureStatistics,
        OODReport,
        TopActivations,
        WarmStart,
    )
    from ncl_lightning.checkpoints.export import export_backbone
    from ncl_lightning.checkpoints.load import CheckpointError, load_backbone, load_method
    from ncl_lightning.data import (
        CIFAR10DataModule,
        CIFAR100DataModule,
        DigitsDataModule,
        DSpritesDataModule,
        ImageFolderDataModule,
        ImageNet100DataModule,
        ImageNetOODDataModule,
        MultiViewDataModule,
        SimCLRAugmentation,
        SparseCodingDataModule,
    )
    from ncl_lightning.evaluation import (
        FeatureSelection,
        FineTune,
        KNNClassifier,
        LinearProbe,
        extract_features,
        fit_linear_probe,
        probe_accuracy,
    )
    from ncl_lightning.foundation.errors import ConfigError, DataError, NCLError
    from ncl_lightning.methods import (
        BYOL,
        CL,
        NCL,
        BayesNCL,
        Classifier,
        Encoded,
        NCEClassifier,
        NCLTopK,
        SimSiam,
        SSLMethod,
        SupConCL,
        SupConNCL,
        TrainableModule,
    )
    from ncl_lightning.methods.trainable import default_callbacks
    from ncl_lightning.metrics import (
        SEPIN,
        ActiveDimensions,
        EffectiveRank,
        ExpectedActivation,
        FeatureProfile,
        MutualInformationGap,
        SemanticConsistency,
        Sparsity,
    )
    from ncl_lightning.nn import (
        MLP,
        LinearClassifier,
        ResNet,
        SmallCNN,
        SparseCodingEncoder,
        SpriteEncoder,
    )
    from ncl_lightning.nn.backbones import resnet18, resnet34, resnet50
    from ncl_lightning.nn.protocols import Backbone
    from ncl_lightning.optim import LARS, scale_lr, warmup_cosine
