"""Export a trained backbone to a folder people load it from, ready for the Hugging Face hub.

[`export_backbone`][] writes ``model.safetensors`` (the weights, keys in our naming),
``config.json`` (how to rebuild it; the equivalent torchvision model and how its keys compare
with ours, measured when the export is made; the training run's evaluation transform,
``preprocessing``; timm's fields where the architecture is exactly timm's, so
``timm.create_model("hf-hub:<repo>", pretrained=True)`` loads it and timm's data config
rebuilds that transform: size, resize, interpolation, mean and std), ``README.md``
(the model card, [`ncl_lightning.checkpoints.card`][]) and, on request,
``torchvision_state_dict.pt`` (the weights keyed as torchvision names them).
[`load_backbone`][ncl_lightning.checkpoints.load.load_backbone] reads the folder back.

Our [`ResNet`][ncl_lightning.nn.ResNet] registers torchvision's children under their own
names: of ``torchvision.models.resnet18``'s 122 keys, 120 are ours (the classifier ``fc`` is
not); timm's ``resnet18`` with ``num_classes=0`` has exactly our 120. With the CIFAR stem
``conv1.weight`` is ``[64, C, 3, 3]`` and there is no max-pool, so torchvision's model takes
the weights once its ``conv1`` and ``maxpool`` are replaced like ours.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ncl_lightning.checkpoints.card import CARD_FILE, model_card
from ncl_lightning.checkpoints.check import CheckpointNotFoundError
from ncl_lightning.checkpoints.load import (
    CONFIG_FILE,
    RECORD_KEY,
    TORCHVISION_FILE,
    WEIGHTS_FILE,
    backbone_from_checkpoint,
    read_checkpoint,
    state_diff,
)
from ncl_lightning.foundation.disk import atomic_write
from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.validation import check_choice, check_output_dir

EXPORT_FORMATS = ("safetensors", "torchvision", "timm", "all")
EXPORT_FILES = (CARD_FILE, CONFIG_FILE, WEIGHTS_FILE, TORCHVISION_FILE)
EXPORT_VERSION = 1


@dataclass(frozen=True)
class KeyMap:
    """How a backbone's weights map onto a library's model of the same architecture.

    Attributes:
        library: ``"torchvision"`` or ``"timm"``.
        architecture: The library's model name (``resnet18``).
        prefix: What our keys add in front of the library's (``""`` for our ResNet,
            ``"model."`` for a ``TorchvisionBackbone``).
        exact: Same architecture, so the library's model takes the weights as it is;
            otherwise ``caveat`` says what to change first.
        caveat: What differs (the stem), or ``""``.
        keys: How the library's keys compare with ours (filled by [`compare_keys`][]).
    """

    library: str
    architecture: str
    prefix: str
    exact: bool
    caveat: str = ""
    keys: dict[str, Any] = field(default_factory=dict)


def _resnet_caveat(init_args: Mapping[str, Any]) -> str:
    channels, padding = init_args.get("in_channels", 3), init_args.get("stem_padding")
    if init_args.get("stem", "cifar") == "cifar":
        return (
            f"CIFAR stem: conv1 is 3x3, stride 1, padding {padding}, over {channels} "
            "channel(s) and there is no max-pool (torchvision/timm: 7x7, stride 2, padding 3, "
            "then a 3x3 max-pool); replace conv1 and maxpool before loading"
        )
    return f"conv1 takes {channels} channel(s) with padding {padding} (torchvision: 3, 3)"


def key_maps(backbone: nn.Module) -> dict[str, KeyMap]:
    """The torchvision / timm models a backbone's weights map onto (``{}``: none known).

    Our [`ResNet`][ncl_lightning.nn.ResNet]: torchvision's ``resnet{depth}`` always (the
    stem may differ: ``caveat``), timm's ``resnet{depth}`` when the architecture is exactly
    timm's (ImageNet stem, 3 channels, padding 3). The package's ``TorchvisionBackbone``
    (``ncl_lightning.nn``): its torchvision model, keys without the ``model.`` prefix.
    """
    from ncl_lightning.nn.backbones import ResNet

    spec = getattr(backbone, "spec", None) or {}
    args = dict(spec.get("init_args") or {})
    module, _, name = str(spec.get("class_path", "")).rpartition(".")
    if isinstance(backbone, ResNet):
        arch = f"resnet{args.get('depth', 18)}"
        exact = (args.get("stem"), args.get("in_channels"), args.get("stem_padding")) == (
            "imagenet", 3, 3,
        )  # fmt: skip
        caveat = "" if exact else _resnet_caveat(args)
        maps = {"torchvision": KeyMap("torchvision", arch, "", exact, caveat)}
        if exact:
            maps["timm"] = KeyMap("timm", arch, "", True)
        return maps
    if module.startswith("ncl_lightning.nn") and name == "TorchvisionBackbone":
        exact = not args.get("cifar_stem") and args.get("in_channels", 3) == 3
        caveat = "" if exact else "its stem differs from torchvision's (cifar_stem/in_channels)"
        return {"torchvision": KeyMap("torchvision", args["name"], "model.", exact, caveat)}
    return {}


def renamed(state: Mapping[str, torch.Tensor], keymap: KeyMap) -> dict[str, torch.Tensor]:
    """``state`` keyed as ``keymap.library`` names it (our prefix dropped)."""
    n = len(keymap.prefix)
    return {k[n:]: v for k, v in state.items() if k.startswith(keymap.prefix)}


def library_shapes(keymap: KeyMap) -> dict[str, tuple[int, ...]]:
    """``{key: shape}`` of the library's model (built on the meta device: no memory, no
    download; timm's with ``num_classes=0``)."""
    with torch.device("meta"):
        if keymap.library == "timm":
            import timm

            net = timm.create_model(keymap.architecture, pretrained=False, num_classes=0)
        else:
            import torchvision

            net = torchvision.models.get_model(keymap.architecture, weights=None)
    return {k: tuple(v.shape) for k, v in net.state_dict().items()}


def compare_keys(state: Mapping[str, torch.Tensor], keymap: KeyMap) -> dict[str, Any]:
    """How the library's keys compare with ``state``'s (renamed): ``{"theirs", "same",
    "missing", "unexpected", "shape_differs"}`` (missing: theirs, not ours)."""
    theirs = library_shapes(keymap)
    ours = {k: tuple(v.shape) for k, v in renamed(state, keymap).items()}
    missing, unexpected, shape_differs = state_diff(ours, theirs)
    return {
        "theirs": len(theirs),
        "same": sum(1 for k in ours if theirs.get(k) == ours[k]),
        "missing": missing,
        "unexpected": unexpected,
        "shape_differs": shape_differs,
    }


def _wanted_files(format: str, maps: Mapping[str, KeyMap], what: str) -> list[str]:
    """The files ``format`` asks for; a variant asked by name must apply."""
    for library in ("torchvision", "timm"):
        if format == library and library not in maps:
            found = {m: (k.architecture, k.exact) for m, k in maps.items()} or "none"
            raise ConfigError(
                f"format: {library!r} does not apply to {what} (no exact {library} "
                f"equivalent; maps found: {found}); use format 'safetensors'",
                key="format",
            )
    files = [WEIGHTS_FILE, CONFIG_FILE, CARD_FILE]
    if format in ("torchvision", "all") and "torchvision" in maps:
        files.append(TORCHVISION_FILE)
    return files


def _source(
    checkpoint: str | Path | nn.Module,
) -> tuple[nn.Module, dict[str, Any] | None, Path | None]:
    """``(backbone, checkpoint dict or None, its file or None)``: read and checked, nothing
    written."""
    if isinstance(checkpoint, nn.Module):
        if not isinstance(getattr(checkpoint, "spec", None), dict):
            raise ConfigError(
                f"checkpoint: {type(checkpoint).__name__} has no `spec` (how to rebuild it); "
                "export a checkpoint, or a backbone of ncl_lightning.nn",
                key="checkpoint",
            )
        return checkpoint, None, None
    path = Path(checkpoint).expanduser()
    if path.is_dir():
        raise ConfigError(f"checkpoint: {path} is a folder, not a checkpoint file (.ckpt)",
                          key="checkpoint")  # fmt: skip
    if not path.is_file():
        raise CheckpointNotFoundError(f"checkpoint: no such file: {path}", key="checkpoint")
    ckpt = read_checkpoint(path)  # read once: the backbone and the card both use it
    return backbone_from_checkpoint(ckpt, path), ckpt, path


def crop_fraction(crop: int, resize: int | None) -> float:
    """timm's ``crop_pct`` for a centre crop of ``crop`` pixels from a shorter side resized
    to ``resize`` (``None``: no resize, 1.0): the largest float whose
    ``floor(crop / crop_pct)`` is ``resize``, the size timm's evaluation transform resizes
    to (``crop / resize`` itself can round the other way)."""
    if resize is None:
        return 1.0
    fraction = crop / resize
    while math.floor(crop / fraction) < resize:
        fraction = math.nextafter(fraction, 0.0)
    return fraction


def timm_preprocessing(preprocessing: Mapping[str, Any]) -> dict[str, Any]:
    """timm's ``pretrained_cfg`` fields for the training run's evaluation transform
    ([`preprocessing`][ncl_lightning.data.MultiViewDataModule.preprocessing]), so that
    ``timm.data.resolve_data_config`` and ``create_transform`` rebuild it."""
    input_size = list(preprocessing["input_size"])
    return {
        "input_size": input_size,
        "interpolation": preprocessing["interpolation"],
        "mean": list(preprocessing["mean"]),
        "std": list(preprocessing["std"]),
        "crop_pct": crop_fraction(input_size[-1], preprocessing.get("resize")),
        "crop_mode": preprocessing.get("crop_mode", "center"),
    }


def export_config(
    backbone: nn.Module,
    maps: Mapping[str, KeyMap],
    method: str | None,
    preprocessing: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``config.json`` of an export (module docstring); ``preprocessing``: the training
    run's evaluation transform from the checkpoint's record (``None``: not recorded, a
    checkpoint written before 2026-11-30 or a backbone exported from Python)."""
    spec = backbone.spec
    config: dict[str, Any] = {
        "class_path": spec["class_path"],
        "init_args": dict(spec.get("init_args") or {}),
        "out_dim": int(getattr(backbone, "out_dim", 0)) or None,
        "ncl_lightning": {"export_version": EXPORT_VERSION, "method": method},
    }
    if preprocessing is not None:
        config["preprocessing"] = dict(preprocessing)
    if "torchvision" in maps:
        config["torchvision"] = asdict(maps["torchvision"])
    if "timm" in maps:
        config["timm"] = asdict(maps["timm"])
        pretrained_cfg: dict[str, Any] = {"num_classes": 0}
        if preprocessing is not None:
            pretrained_cfg.update(timm_preprocessing(preprocessing))
        config.update(
            architecture=maps["timm"].architecture, num_classes=0,
            num_features=config["out_dim"], pretrained_cfg=pretrained_cfg,
        )  # fmt: skip
    return config


def export_backbone(
    checkpoint: str | Path | nn.Module,
    out_dir: str | Path,
    *,
    format: str = "safetensors",
    overwrite: bool = False,
    license: str = "mit",
) -> Path:
    """Write a trained backbone's folder: weights, config and model card (module docstring).

    Every input is checked before anything is written: the checkpoint is read (tensor-only,
    trusted class paths) and the backbone rebuilt; the folder must be new or empty.

    Args:
        checkpoint: A checkpoint of the package (any method, a probe, a fine-tune), or a
            backbone with a ``spec`` (no training facts on its card then).
        out_dir: The folder to write (created).
        format: ``"safetensors"``: ``model.safetensors``, ``config.json`` and
            ``README.md`` (plus timm's fields where the architecture is exactly timm's);
            ``"torchvision"``: also ``torchvision_state_dict.pt``; ``"timm"``: as
            ``"safetensors"``, refused unless timm's model is the same architecture;
            ``"all"``: every variant that applies.
        overwrite: Replace the export's files in a folder that is not empty (other files,
            such as a hub clone's ``.git``, are left alone).
        license: The card's ``license`` (a Hugging Face license id).

    Returns:
        ``out_dir``.

    Raises:
        CheckpointError: The checkpoint is missing, unsafe, foreign or damaged.
        ConfigError: ``out_dir`` is a file or holds files (without ``overwrite``), or a
            ``format`` that does not apply or is unknown.

    Example:
        >>> export_backbone("runs/cifar10_ncl/last.ckpt", "export/ncl-resnet18")
        >>> encoder = load_backbone("export/ncl-resnet18")
    """
    from safetensors.torch import save

    check_choice("format", format, EXPORT_FORMATS)
    backbone, ckpt, source = _source(checkpoint)
    name = source.name if source is not None else type(backbone).__name__
    out = Path(out_dir).expanduser()
    check_output_dir("out_dir", out)
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise ConfigError(
            f"out_dir: {out} exists and is not empty; choose a new folder or pass "
            "overwrite=True (--overwrite) to replace the export's files in it",
            key="out_dir",
        )
    maps = key_maps(backbone)
    files = _wanted_files(format, maps, f"{type(backbone).__name__} ({name})")
    state = {k: v.detach().cpu().contiguous().clone() for k, v in backbone.state_dict().items()}
    keyed = {lib: replace(m, keys=compare_keys(state, m)) for lib, m in maps.items()}
    record = ckpt[RECORD_KEY] if ckpt else {}
    config = export_config(backbone, keyed, record.get("method"), record.get("preprocessing"))
    contents = {
        WEIGHTS_FILE: save(state, metadata={"format": "pt"}),
        CONFIG_FILE: (json.dumps(config, indent=2, sort_keys=False) + "\n").encode(),
        CARD_FILE: model_card(config, ckpt, source, files, license).encode(),
    }
    if TORCHVISION_FILE in files:
        buffer = io.BytesIO()
        torch.save(renamed(state, keyed["torchvision"]), buffer)
        contents[TORCHVISION_FILE] = buffer.getvalue()
    for file, data in contents.items():
        with atomic_write(out / file, size=len(data)) as f:
            f.write(data)
    for stale in set(EXPORT_FILES) - set(files):
        (out / stale).unlink(missing_ok=True)
    return out


__all__ = [
    "EXPORT_FILES",
    "EXPORT_FORMATS",
    "TORCHVISION_FILE",
    "KeyMap",
    "compare_keys",
    "crop_fraction",
    "export_backbone",
    "export_config",
    "key_maps",
    "library_shapes",
    "renamed",
    "timm_preprocessing",
]
