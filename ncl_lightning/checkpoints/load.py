"""Safe checkpoint reading: backbones and whole methods from any checkpoint we write.

Every checkpoint of the package carries a small record (``checkpoint["ncl_lightning"]``,
written by [`write_record`][ncl_lightning.methods.record.write_record]): the method's class
path and how to build its backbone (``{"class_path", "init_args"}``), so
[`load_backbone`][] rebuilds the encoder from the file alone. Files are read with
``torch.load(weights_only=True)`` (a pickled object that would run code is refused before
anything in it executes) and checked ([`ncl_lightning.checkpoints.check`][]) before any
class they name is imported.
"""

from __future__ import annotations

import importlib
import inspect
import json
import pickle
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch import nn

from ncl_lightning.checkpoints.check import (
    TRUSTED_ENV,
    CheckpointError,
    CheckpointNotFoundError,
    check_class_paths,
    check_structure,
    is_trusted,
)
from ncl_lightning.checkpoints.record import (
    RECORD_FORMAT,
    RECORD_KEY,
    class_path,
    same_class,
    trained_backbone_spec,
)
from ncl_lightning.foundation.internals import outside_cli

BACKBONE_PREFIX = "backbone."
SHOWN_KEYS = 8
# The files of an exported backbone's folder (checkpoints.export).
WEIGHTS_FILE = "model.safetensors"
TORCHVISION_FILE = "torchvision_state_dict.pt"
CONFIG_FILE = "config.json"


def read_checkpoint(path: str | Path, trusted: Iterable[str] = ()) -> dict[str, Any]:
    """Read one of our checkpoints with tensor-only unpickling, and validate it (the one
    reader of every checkpoint of the package; [`ncl_lightning.checkpoints.check`][]).

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
    if path.is_dir():
        export = " (an exported backbone)" if (path / "config.json").is_file() else ""
        raise CheckpointError(f"{path} is a folder{export}, not a checkpoint file (.ckpt)")
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
        raise CheckpointError(
            f"{source}: {what} names {path!r} from a module that is not trusted (not "
            f"imported: importing runs its code); if you trust it, set "
            f"{TRUSTED_ENV}={module_name}",
            key="path",
        )
    try:
        obj = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError):
        raise CheckpointError(f"{source}: {what} class {path!r} cannot be imported") from None
    if not (isinstance(obj, type) and issubclass(obj, base)):
        raise CheckpointError(f"{source}: {what} {path!r} is not a {base.__name__} subclass")
    return obj


def build_backbone_from_spec(spec: dict[str, Any], source: Path | str = "checkpoint") -> nn.Module:
    """Instantiate ``{"class_path", "init_args"}`` after checking it names an ``nn.Module``."""
    if not isinstance(spec, dict) or not isinstance(spec.get("class_path"), str):
        raise CheckpointError(f"{source}: malformed backbone record {spec!r}")
    cls = _import_class(spec["class_path"], nn.Module, "backbone", source)
    init_args = spec.get("init_args") or {}
    if not isinstance(init_args, dict):
        raise CheckpointError(f"{source}: backbone init_args must be a mapping, got {init_args!r}")
    return cls(**init_args)


def _rebuild(spec: dict[str, Any], record_format: Any, source: Path | str) -> nn.Module:
    """The backbone ``spec`` was trained as (never downloading weights), carrying its spec."""
    spec = trained_backbone_spec(spec, record_format)
    backbone = build_backbone_from_spec(spec, source)
    if not isinstance(getattr(backbone, "spec", None), dict):
        backbone.spec = spec  # modules that load it record the same architecture
    return backbone


def load_backbone(path: str | Path, backbone: nn.Module | None = None) -> nn.Module:
    """The pretrained backbone of any ncl-lightning checkpoint, as a plain ``nn.Module``.

    Reads tensors only (``weights_only=True``), rebuilds the architecture from the
    checkpoint's record (or uses ``backbone``) and loads its ``backbone.*`` weights
    strictly. The module is returned in training mode on the CPU; a backbone rebuilt from
    the record carries it as ``spec``, so a module holding it writes the same record.

    An exported folder (``model.safetensors`` and ``config.json``, written by
    [`export_backbone`][ncl_lightning.checkpoints.export.export_backbone]), or its
    ``.safetensors`` file with ``config.json`` beside it, is read the same way: safetensors
    holds tensors only, and the config's ``class_path`` must come from a trusted module.

    Args:
        path: Checkpoint of CL, NCL, BayesNCL, NCE, a linear probe or a fine-tune, or an
            exported backbone's folder (or its ``.safetensors`` file).
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
    if Path(path).expanduser().is_dir() or Path(path).suffix == ".safetensors":
        return _load_exported(Path(path).expanduser(), backbone)
    return backbone_from_checkpoint(read_checkpoint(path), path, backbone)


def backbone_from_checkpoint(
    ckpt: dict[str, Any], path: str | Path, backbone: nn.Module | None = None
) -> nn.Module:
    """[`load_backbone`][] of a checkpoint already read by [`read_checkpoint`][] (not read again).

    Args:
        ckpt: The checkpoint dict [`read_checkpoint`][] returned.
        path: The file it was read from (named in errors).
        backbone: As [`load_backbone`][]'s.
    """
    if backbone is None:
        spec = ckpt[RECORD_KEY].get("backbone")
        if spec is None:
            raise CheckpointError(
                f"{path} does not record how to build its backbone (a Python-built backbone "
                "without `spec`); pass load_backbone(path, backbone=<architecture>)"
            )
        backbone = _rebuild(spec, ckpt[RECORD_KEY].get("format"), path)
    state = {
        k[len(BACKBONE_PREFIX) :]: v
        for k, v in ckpt["state_dict"].items()
        if k.startswith(BACKBONE_PREFIX)
    }
    if not state:
        raise CheckpointError(f"{path} holds no '{BACKBONE_PREFIX}*' weights")
    return _load_strictly(backbone, state, path)


def _load_strictly(backbone: nn.Module, state: dict[str, Any], path: Path | str) -> nn.Module:
    try:
        missing, unexpected = backbone.load_state_dict(state, strict=False)
    except (RuntimeError, TypeError) as err:  # shapes that differ, entries that are no tensor
        name = type(backbone).__name__
        reason = " ".join(str(err).split())
        reason = reason.removeprefix(f"Error(s) in loading state_dict for {name}: ")
        raise CheckpointError(f"{path}: weights do not fit {name}: {reason[:500]}") from None
    if missing or unexpected:
        raise CheckpointError(
            f"{path}: weights do not fit {type(backbone).__name__}: missing keys "
            f"{missing[:5]}{'...' if len(missing) > 5 else ''}, unexpected keys "
            f"{unexpected[:5]}{'...' if len(unexpected) > 5 else ''}"
        )
    return backbone


def _check_shapes(
    planned: nn.Module, shapes: dict[str, tuple[int, ...]], config: Path, weights: Path
) -> None:
    """Refuse a ``config.json`` whose architecture (built on the meta device) does not hold
    the weights' names and shapes."""
    wanted = {k: tuple(v.shape) for k, v in planned.state_dict().items()}
    if wanted == shapes:
        return
    differ = [f"{k}: {shapes[k]} in the weights, {v} by the config" for k, v in wanted.items()
              if k in shapes and shapes[k] != v]  # fmt: skip
    missing, unexpected = sorted(wanted.keys() - shapes), sorted(shapes.keys() - wanted)
    what = "; ".join(differ[:3]) or f"missing keys {missing[:5]}, unexpected keys {unexpected[:5]}"
    raise CheckpointError(
        f"{config}: the architecture it describes does not fit {weights.name} ({what}); "
        "export the checkpoint again with python -m ncl_lightning.export"
    )


def _load_exported(path: Path, backbone: nn.Module | None) -> nn.Module:
    """``load_backbone`` of an exported folder or its ``.safetensors`` file."""
    from safetensors import SafetensorError, safe_open
    from safetensors.torch import load_file

    folder = path if path.is_dir() else path.parent
    config_path = folder / CONFIG_FILE
    if not path.exists():
        raise CheckpointNotFoundError(f"exported backbone not found: {path}", key="path")
    if not config_path.is_file():
        raise CheckpointError(
            f"{folder}: no {CONFIG_FILE} (the architecture to rebuild) in this folder; "
            "write one with python -m ncl_lightning.export CKPT OUT_DIR",
            key="path",
        )
    try:
        config = json.loads(config_path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{config_path}: cannot read it as JSON ({err})") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"{config_path}: expected a JSON object, got {type(config).__name__}")
    weights = path / WEIGHTS_FILE if path.is_dir() else path
    if not weights.is_file():
        raise CheckpointNotFoundError(
            f"{path}: no {weights.name} (the weights) in this folder", key="path"
        )
    try:
        with safe_open(weights, framework="pt") as f:  # the header only: names and shapes
            shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118
    except (SafetensorError, OSError) as err:
        raise CheckpointError(f"cannot read {weights}: {err}") from None
    if backbone is None:
        # An export holds the trained weights: never download pretrained ones on top (a
        # hand-edited config.json may ask for them). Its sizes are checked against the
        # weights' shapes on the meta device first: a forged size allocates nothing.
        init_args = config.get("init_args") or {}
        spec = {"class_path": config.get("class_path"), "init_args": init_args}
        with torch.device("meta"):
            planned = _rebuild(spec, RECORD_FORMAT, config_path)
        _check_shapes(planned, shapes, config_path, weights)
        backbone = _rebuild(spec, RECORD_FORMAT, config_path)
    try:
        state = load_file(weights, device="cpu")  # tensors only, by design
    except (SafetensorError, OSError) as err:
        raise CheckpointError(f"cannot read {weights}: {err}") from None
    return _load_strictly(backbone, state, weights)


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


def state_diff(
    ours: Mapping[str, tuple[int, ...]], theirs: Mapping[str, tuple[int, ...]]
) -> tuple[list[str], list[str], list[str]]:
    """``(missing, unexpected, shape_differs)`` of two ``{key: shape}`` maps, each sorted:
    keys of ``theirs`` only, keys of ``ours`` only, shared keys whose shapes differ."""
    shared = set(ours) & set(theirs)
    return (
        sorted(set(theirs) - set(ours)),
        sorted(set(ours) - set(theirs)),
        sorted(k for k in shared if tuple(ours[k]) != tuple(theirs[k])),
    )


def check_state_fits(ckpt: dict[str, Any], model: nn.Module, path: str | Path) -> None:
    """Refuse a checkpoint whose weights do not fit ``model``: another method, or the same
    method with other dimensions. Lists the missing, unexpected and mis-shaped keys.

    A fit resuming it also restores its optimizer state, whose parameter groups are
    checked once the optimizers are built
    ([`check_optimizer_groups`][ncl_lightning.checkpoints.optimizer_groups.check_optimizer_groups])."""
    ours = {k: tuple(v.shape) for k, v in ckpt["state_dict"].items()}  # tensors: checked
    theirs = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    missing, unexpected, differs = state_diff(ours, theirs)
    shapes = [f"{k} {ours[k]} vs {theirs[k]}" for k in differs]
    written_by = ckpt[RECORD_KEY].get("method")
    expected = class_path(type(model))
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
    "CONFIG_FILE",
    "RECORD_KEY",
    "SHOWN_KEYS",
    "TORCHVISION_FILE",
    "WEIGHTS_FILE",
    "CheckpointError",
    "CheckpointNotFoundError",
    "backbone_from_checkpoint",
    "build_backbone_from_spec",
    "check_state_fits",
    "load_backbone",
    "load_method",
    "read_checkpoint",
    "state_diff",
]
