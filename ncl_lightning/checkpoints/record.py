"""The record every checkpoint of the package carries, and what reads it back.

``checkpoint["ncl_lightning"]`` holds the module's class path, how to build its backbone
(``{"class_path", "init_args"}``, so [`load_backbone`][ncl_lightning.checkpoints.load.load_backbone]
rebuilds the encoder from the file alone) and, written by the module's own
[`write_record`][ncl_lightning.methods.record.write_record], the run's logger
versions and identity. This module has the record's core: pure functions of a module.
"""

from __future__ import annotations

import importlib
from typing import Any

from torch import nn

RECORD_KEY = "ncl_lightning"
RECORD_FORMAT = 2
# Format 2 (2026-11-26): the ResNet CIFAR stem pads ``conv1`` by 2, as the releases do; a
# format-1 record's ResNet with a CIFAR stem and no ``stem_padding`` was trained with 1.
_RESNETS = ("ResNet", "resnet18", "resnet34", "resnet50")
_BACKBONES = ("ncl_lightning.nn", "ncl_lightning.nn.backbones")
# Backbones that would download weights: the init argument that turns it off.
_DOWNLOADS = {"TimmBackbone": ("pretrained", False), "TorchvisionBackbone": ("weights", None)}
_EXTERNAL = ("ncl_lightning.nn", "ncl_lightning.nn.external")


def class_path(obj: type) -> str:
    """``module.QualName`` of a class, as LightningCLI writes it."""
    return f"{obj.__module__}.{obj.__qualname__}"


def spec_of(backbone: nn.Module | None, configured: Any = None) -> dict[str, Any] | None:
    """How to rebuild ``backbone``: the config's ``class_path`` dict, else its ``spec``."""
    if isinstance(configured, dict) and "class_path" in configured:
        return {
            "class_path": configured["class_path"],
            "init_args": configured.get("init_args", {}),
        }
    spec = getattr(backbone, "spec", None)
    return spec if isinstance(spec, dict) else None


def backbone_spec(module: nn.Module) -> dict[str, Any] | None:
    """``{"class_path", "init_args"}`` of ``module``'s backbone, or ``None`` if unknown.

    The module's own ``backbone_spec()`` when it has one (modules that wrap a loaded
    method), else from ``module.backbone`` and the configured ``hparams["backbone"]``
    (ncl-cli stores the config's ``class_path`` dict there).
    """
    own = getattr(module, "backbone_spec", None)
    if callable(own):
        return own()
    configured = getattr(module, "hparams", {}).get("backbone")
    return spec_of(getattr(module, "backbone", None), configured)


def make_record(module: nn.Module, spec: dict[str, Any] | None) -> dict[str, Any]:
    """The record of ``module``'s checkpoint: format, method class path, backbone spec.

    Args:
        module: The LightningModule being saved.
        spec: ``{"class_path", "init_args"}`` rebuilding ``module.backbone``, or ``None``
            when unknown (a user backbone built from Python without ``spec``).
    """
    return {"format": RECORD_FORMAT, "method": class_path(type(module)), "backbone": spec}


def same_class(path_a: str | None, path_b: str) -> bool:
    """Whether two dotted class paths name one class (``lightning.pytorch.loggers.CSVLogger``
    and ``lightning.pytorch.loggers.csv_logs.CSVLogger`` do)."""
    if not path_a:
        return False
    if path_a == path_b:
        return True
    try:
        found = []
        for path in (path_a, path_b):
            module, _, name = path.rpartition(".")
            found.append(getattr(importlib.import_module(module), name))
    except (ImportError, AttributeError, ValueError):
        return False
    return found[0] is found[1]


def trained_backbone_spec(spec: Any, record_format: Any) -> Any:
    """The spec that rebuilds the architecture a backbone was trained with.

    A [`TimmBackbone`][ncl_lightning.nn.TimmBackbone] or
    [`TorchvisionBackbone`][ncl_lightning.nn.TorchvisionBackbone] configured with pretrained
    weights is rebuilt without them (``pretrained: false``, ``weights: null``): the
    checkpoint holds the trained weights, and reading it never downloads.

    Records before format 2 name the package's ResNet with a CIFAR stem without
    ``stem_padding``: those were trained with padding 1 (32x32 maps), the default then; the
    default is now 2 (34x34, the releases'). Any other spec is returned unchanged.

    Args:
        spec: ``{"class_path", "init_args"}`` of the record (or anything else, unchanged).
        record_format: The record's ``format``.
    """
    init_args = spec.get("init_args") or {} if isinstance(spec, dict) else None
    if not isinstance(init_args, dict):
        return spec
    module, _, name = str(spec.get("class_path", "")).rpartition(".")
    changes = {}
    off = _DOWNLOADS.get(name) if module in _EXTERNAL else None
    if off is not None and init_args.get(off[0]):
        changes[off[0]] = off[1]
    older = isinstance(record_format, int) and record_format < 2
    cifar = "stem_padding" not in init_args and init_args.get("stem", "cifar") == "cifar"
    if older and cifar and module in _BACKBONES and name in _RESNETS:
        changes["stem_padding"] = 1
    return {**spec, "init_args": {**init_args, **changes}} if changes else spec
