"""What ``ncl-cli`` needs before it parses: the package's classes imported (for their short
names) and the parsers' descriptions naming this project.

jsonargparse resolves a short class name (``--model NCL``, ``--data DigitsDataModule``,
``--model.backbone SmallCNN``, ``--model.optimizer LARS``, a callback's ``class_path:
FeatureStatistics``) by walking the subclasses of the argument's type that Python has
loaded (``cls.__subclasses__()``): a class whose module was never imported is unknown, and
the name is read as a path ("Expected a path but NCL either not accessible or invalid").
[`import_public_classes`][] imports the packages that define the methods, evaluation
protocols, DataModules, callbacks, backbones and optimisers before the parser is built.
A researcher's own classes keep working by their full ``class_path``.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterable
from typing import Any

from lightning.pytorch import Trainer

# The parsers' description (``ncl-cli fit --help`` and the others).
SUMMARY = (
    "ncl-lightning: interpretable self-supervised learning (CL, NCL, BayesNCL, NCE) with "
    "PyTorch Lightning; `ncl-cli --help` for an overview."
)
# Packages whose classes a config or the command line may name by their short name.
PUBLIC_PACKAGES = (
    "ncl_lightning.methods",
    "ncl_lightning.evaluation",
    "ncl_lightning.data",
    "ncl_lightning.callbacks",
    "ncl_lightning.atlas",
    "ncl_lightning.nn",
    "ncl_lightning.optim",
)


def import_public_classes() -> None:
    """Import [`PUBLIC_PACKAGES`][] so that jsonargparse finds their classes by name."""
    for package in PUBLIC_PACKAGES:
        importlib.import_module(package)


def parser_kwargs(subcommands: Iterable[str]) -> dict[str, Any]:
    """LightningCLI ``parser_kwargs``: the main parser's description and each subcommand's
    (``ncl-cli fit --help``), which names this project before the Trainer method's first
    docstring line (what LightningCLI shows by default).

    Args:
        subcommands: The LightningCLI's subcommand names (``LightningCLI.subcommands()``).
    """
    kwargs: dict[str, Any] = {"description": SUMMARY}
    for sub in subcommands:
        doc = inspect.getdoc(getattr(Trainer, sub)) or ""
        first = doc.strip().splitlines()[0] if doc.strip() else ""
        kwargs[sub] = {"description": f"ncl-cli {sub}: {first} {SUMMARY}".replace("  ", " ")}
    return kwargs
