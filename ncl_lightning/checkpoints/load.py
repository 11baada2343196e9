"""Safe checkpoint reading: backbones and whole methods from any checkpoint we write.

Every checkpoint of the package carries a small record (``checkpoint["ncl_lightning"]``,
written by the [`CheckpointRecord`][ncl_lightning.runtime.checkpoint_record.CheckpointRecord]
callback): the method's class path and how to build its backbone (``{"class_path", "init_args"}``).
With it, [`load_backbone`][] rebuilds the encoder of a CL, NCL, BayesNCL, NCE or probe
checkpoint from the file alone.

Files are read with ``torch.load(weights_only=True)``: only tensors and plain containers
are unpickled, so a checkpoint carrying a pickled object that would run code is refused
before anything in it executes. The structure is validated and every class path the file
names must come from a trusted module before anything is imported
([`ncl_lightning.checkpoints.check`][]); the classes must then be ``nn.Module``
(backbone) or ``LightningModule`` (method) subclasses.
"""

from __future__ import annotations

import importlib
import inspect
import pickle
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch import nn

from ncl_lightning.checkpoints.check import (
    CheckpointError,
    CheckpointNotFoundError,
    check_class_paths,
    check_structure,
    is_trusted,
)
from ncl_lightning.checkpoints.record import RECORD_KEY, same_class, trained_backbone_spec
from ncl_lightning.foundation.internals import outside_cli

BACKBONE_PREFIX = "backbone."
SHOWN_KEYS = 8


def read_checkpoint(path: str | Path, trusted: Iterable[str] = ()) -> dict[str, Any]:
    """Read one of our checkpoints with tensor-only unpickling, and validate it.

    The one reader of every checkpoint of the package: the structure is checked
    ([`check_structure`][ncl_lightning.checkpoints.check.check_structure]) and every class path
    it names must come from a trusted module
    ([`check_class_paths`][ncl_lightning.checkpoints.check.check_class_paths]), before anything
    in it is used or imported.

    Args:
        path: Checkpoint file.
        trusted: Module prefixes to trust besides this package, its libraries and
            ``$NCL_TRUSTED_MODULES``.

    Returns:
        The checkpoint dict (``state_dict``, ``hyper_parameters``, the record, ...).

    Raises:
        CheckpointNotFoundError: No such file (also a ``FileNotFoundError``).
        CheckpointError: The file holds executable pickled objects (refused, nothing run),
            is not a torch checkpoint, was not written by ncl-lightning, is damaged (the
            entry is named) or names a class of an untrusted module.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise CheckpointNotFoundError(f"checkpoint not found: {path}", key="checkpoint")
    if not zipfile.is_zipfile(path):
        raise CheckpointError(f"cannot read checkpoint {path}: not a torch.save zip archive")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        reason = next(
            (line for line in lines if "GLOBAL" in line or "Unsupported" in line),
            lines[0] if lines else "",
        )
        raise CheckpointError(
            f"refusing to load {path}: it holds pickled objects other than tensors, which "
            f"could execute code ({reason[:200]})"
        ) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError) as err:
        raise CheckpointError(f"cannot read checkpoint {path}: {err}") from None
    check_class_paths(check_structure(ckpt, path), path, trusted)
    return ckpt


def _import_class(path: str, base: type, what: str, source: Path | str) -> type:
    module_name, _, name = str(path).rpartition(".")
    if not is_trusted(module_name):
        raise CheckpointError(f"{source}: {what} class {path!r} is not from a trusted module")
    try:
        obj = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError):
        raise CheckpointError(f"{source}: {what} class {path!r} cannot be imported") from None
    if not (isinstance(obj, type) and issubclass(obj, base)):
        raise CheckpointError(f"{source}: {what} {path!r} is not a {base.__name__} subclass")
    return obj


def build_backbone_from_spec(spec: dict[str, Any], source: Path | str = "checkpoint") -> nn.Module:
    """Instantiate ``{"class_path", "init_args"}`` after checking it names an ``nn.Module``."""
    if not isinstance(spec, dict) or "class_path" not in spec:
        raise CheckpointError(f"{source}: malformed backbone record {spec!r}")
    cls = _import_class(spec["class_path"], nn.Module, "backbone", source)
    init_args = spec.get("init_args") or {}
    if not isinstance(init_args, dict):
        raise CheckpointError(f"{source}: backbone init_args must be a mapping, got {init_args!r}")
    return cls(**init_args)


def load_backbone(path: str | Path, backbone: nn.Module | None = None) -> nn.Module:
    """The pretrained backbone of any ncl-lightning checkpoint, as a plain ``nn.Module``.

    Reads tensors only (``weights_only=True``), rebuilds the architecture from the
    checkpoint's record (or uses ``backbone``) and loads its ``backbone.*`` weights
    strictly. The module is returned in training mode on the CPU; a backbone rebuilt from
    the record carries it as ``spec``, so a module holding it writes the same record.

    Args:
        path: Checkpoint of CL, NCL, BayesNCL, NCE, a linear probe or a fine-tune.
        backbone: An architecture to load the weights into, for checkpoints of modules
            built from Python around a backbone without a ``spec``.

    Returns:
        The backbone ``[B, C, H, W] -> [B, out_dim]`` with the checkpoint's weights.

    Raises:
        CheckpointError: Unsafe, foreign or tampered file, or weights that do not fit
            (missing and unexpected keys listed).

    Example:
        >>> encoder = load_backbone("runs/cifar10_ncl/last.ckpt").eval()
        >>> h = encoder(images)  # [B, 512]
    """
    ckpt = read_checkpoint(path)
    if backbone is None:
        spec = ckpt[RECORD_KEY].get("backbone")
        if spec is None:
            raise CheckpointError(
                f"{path} does not record how to build its backbone (a Python-built backbone "
                "without `spec`); pass load_backbone(path, backbone=<architecture>)"
            )
        spec = trained_backbone_spec(spec, ckpt[RECORD_KEY].get("format"))
        backbone = build_backbone_from_spec(spec, path)
        if not isinstance(getattr(backbone, "spec", None), dict):
            backbone.spec = spec  # modules that load it record the same architecture
    state = {
        k[len(BACKBONE_PREFIX) :]: v
        for k, v in ckpt["state_dict"].items()
        if k.startswith(BACKBONE_PREFIX)
    }
    if not state:
        raise CheckpointError(f"{path} holds no '{BACKBONE_PREFIX}*' weights")
    missing, unexpected = backbone.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise CheckpointError(
            f"{path}: weights do not fit {type(backbone).__name__}: missing keys "
            f"{missing[:5]}{'...' if len(missing) > 5 else ''}, unexpected keys "
            f"{unexpected[:5]}{'...' if len(unexpected) > 5 else ''}"
        )
    return backbone


def load_method(path: str | Path) -> L.LightningModule:
    """The whole module (backbone, projector, non-negative map, gate) of a checkpoint.

    Used where the projector features ``z`` are needed (feature selection). The method
    class comes from the record and must be a ``LightningModule``; loading is
    tensor-only. Returned on the CPU in eval mode.

    Raises:
        CheckpointError: As [`load_backbone`][], or the module's state does not fit.
    """
    ckpt = read_checkpoint(path)
    record = ckpt[RECORD_KEY]
    cls = _import_class(record.get("method", ""), L.LightningModule, "method", path)
    kwargs: dict[str, Any] = {}
    takes_backbone = "backbone" in inspect.signature(cls.__init__).parameters
    spec = trained_backbone_spec(record.get("backbone"), record.get("format"))
    older = spec is not record.get("backbone")  # an older default the config does not name
    if takes_backbone and (
        older or not isinstance(ckpt.get("hyper_parameters", {}).get("backbone"), dict)
    ):
        if spec is None:
            raise CheckpointError(f"{path} does not record how to build its backbone")
        kwargs["backbone"] = build_backbone_from_spec(spec, path)
    # Called while ncl-cli instantiates an evaluation module, the CLI's "given
    # hyper-parameters" context is set; it belongs to that module, not to this one.
    try:
        with outside_cli():
            module = cls.load_from_checkpoint(path, map_location="cpu", weights_only=True, **kwargs)
    except RuntimeError as err:
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        detail = "; ".join(lines[1:4]) or (lines[0] if lines else "")
        raise CheckpointError(f"{path}: state does not fit {cls.__name__}: {detail}") from None
    return module.eval()


def _listed(keys: list[str]) -> str:
    more = f" (+{len(keys) - SHOWN_KEYS} more)" if len(keys) > SHOWN_KEYS else ""
    return ", ".join(keys[:SHOWN_KEYS]) + more if keys else "none"


def check_state_fits(ckpt: dict[str, Any], model: nn.Module, path: str | Path) -> None:
    """Refuse a checkpoint whose weights do not fit ``model``: another method, or the same
    method with other dimensions. Lists the missing, unexpected and mis-shaped keys."""
    state = ckpt["state_dict"]
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shapes = sorted(
        f"{k} {tuple(state[k].shape)} vs {tuple(own[k].shape)}"
        for k in set(own) & set(state)
        if hasattr(state[k], "shape") and state[k].shape != own[k].shape
    )
    written_by = ckpt[RECORD_KEY].get("method")
    expected = f"{type(model).__module__}.{type(model).__qualname__}"
    same = written_by is None or same_class(written_by, expected)
    if not (missing or unexpected or shapes) and same:
        return
    raise CheckpointError(
        f"ckpt_path: {path} was written by {written_by}, it does not fit {expected}: "
        f"missing keys: {_listed(missing)}; unexpected keys: {_listed(unexpected)}"
        + (f"; shape mismatches: {_listed(shapes)}" if shapes else "")
    )


__all__ = [
    "BACKBONE_PREFIX",
    "RECORD_KEY",
    "CheckpointError",
    "CheckpointNotFoundError",
    "build_backbone_from_spec",
    "check_state_fits",
    "load_backbone",
    "load_method",
    "read_checkpoint",
]
