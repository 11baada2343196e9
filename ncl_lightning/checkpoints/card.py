"""The model card (``README.md``) of an exported backbone: what the checkpoint says, no more.

YAML front matter as the Hugging Face hub reads it, then the method (its class and the
paper its module cites), the training configuration (the checkpoint's hyper-parameters),
the final metrics, the code version and how to load the weights. The card says where each
fact comes from: a checkpoint stores no logged metrics and no code version, so they are
read from the run folder (the record's, or the one holding ``<run>/checkpoints/x.ckpt``):
the last value of each ``metrics.csv`` column logged before the checkpoint's step, the
best score ``ModelCheckpoint`` monitored, ``run.yaml``'s version and commit. No absolute
path, host name or working directory is written on the card.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import math
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath, PureWindowsPath
from types import ModuleType
from typing import Any

import yaml

from ncl_lightning.checkpoints.check import is_trusted
from ncl_lightning.checkpoints.load import SHOWN_KEYS, TORCHVISION_FILE, WEIGHTS_FILE
from ncl_lightning.checkpoints.record import RECORD_KEY
from ncl_lightning.foundation.errors import DataError
from ncl_lightning.plot.metrics_csv import METRICS_FILE, read_metrics

CARD_FILE = "README.md"
SHOWN_METRICS = 40


def _run_files_folders(ckpt: Mapping[str, Any], path: Path) -> list[Path]:
    """Where the run's ``metrics.csv`` / ``run.yaml`` may be: the record's run folder, then
    the checkpoint's folder's parent (``<run>/checkpoints/``) and its own folder."""
    run = (ckpt.get(RECORD_KEY) or {}).get("run") or {}
    found = [Path(run["folder"])] if isinstance(run.get("folder"), str) else []
    return [*found, path.parent.parent, path.parent]


def final_metrics(ckpt: Mapping[str, Any], path: Path) -> tuple[str | None, dict[str, tuple]]:
    """``(source, {name: (value, epoch, step)})``: the last finite value of each
    ``metrics.csv`` column logged before the checkpoint's ``global_step`` (``(None, {})``
    when no file can be read)."""
    step_limit = ckpt.get("global_step")
    for folder in _run_files_folders(ckpt, path):
        file = folder / METRICS_FILE
        if not file.is_file():
            continue
        try:
            series = read_metrics(file)
        except DataError:
            continue
        found: dict[str, tuple] = {}
        for name, points in series.items():
            kept = [p for p in points if math.isfinite(p.value)
                    and not (isinstance(step_limit, int) and p.step >= step_limit)]  # fmt: skip
            if kept:
                found[name] = (kept[-1].value, kept[-1].epoch, kept[-1].step)
        where = "metrics.csv of the run folder"
        if isinstance(step_limit, int):
            where += f", last values logged before the checkpoint's step {step_limit}"
        return where, found
    return None, {}


def monitored(ckpt: Mapping[str, Any]) -> list[tuple[str, float]]:
    """``(monitor, best score)`` of each ``ModelCheckpoint`` state that monitored a metric."""
    found = []
    for state in (ckpt.get("callbacks") or {}).values():
        if not isinstance(state, Mapping) or not state.get("monitor"):
            continue
        score = state.get("best_model_score")
        if score is not None:
            found.append((str(state["monitor"]), float(score)))
    return found


def run_code(ckpt: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """``{"version", "commit", "dirty", "torch", ...}`` from the run folder's ``run.yaml``."""
    for folder in _run_files_folders(ckpt, path):
        file = folder / "run.yaml"
        if not file.is_file():
            continue
        try:
            run = yaml.safe_load(file.read_text()) or {}
        except (OSError, yaml.YAMLError):
            continue
        versions = run.get("versions") or {}
        git = (run.get("git") or {}).get("ncl_lightning") or {}
        return {"version": versions.get("ncl-lightning"), "commit": git.get("commit"),
                "dirty": git.get("dirty"), "torch": versions.get("torch")}  # fmt: skip
    return {}


def _trusted_module(class_path: str | None) -> ModuleType | None:
    """The module of a trusted ``class_path``, imported (``None``: untrusted or absent)."""
    if not class_path or not is_trusted(class_path):
        return None
    try:
        return importlib.import_module(class_path.rpartition(".")[0])
    except (ImportError, ValueError):
        return None


def method_reference(class_path: str | None) -> str:
    """The first line of the method module's docstring (its paper), or ``""``."""
    lines = (getattr(_trusted_module(class_path), "__doc__", None) or "").strip().splitlines()
    return lines[0].strip() if lines else ""


def hub_dataset(class_path: str | None) -> str | None:
    """The Hugging Face hub id of a DataModule's data set (its class's ``hub_id``)."""
    cls = getattr(_trusted_module(class_path), str(class_path).rpartition(".")[2], None)
    hub_id = getattr(cls, "hub_id", None) if isinstance(cls, type) else None
    return hub_id if isinstance(hub_id, str) else None


def elided(text: str) -> str:
    """``text``, or for an absolute path (POSIX, Windows or ``~``) a note keeping only its
    last part: a card is published, and the training machine's folders are not its to show."""
    posix, windows = PurePosixPath(text), PureWindowsPath(text)
    if posix.is_absolute() or windows.is_absolute() or text.startswith("~"):
        name = (windows if windows.is_absolute() else posix).name
        return f"<absolute path on the training machine: {name}>"
    return text


def plain(value: Any) -> Any:
    """A YAML-safe copy of hyper-parameters (other objects as their ``str``; absolute paths
    [`elided`][ncl_lightning.checkpoints.card.elided])."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items() if k != "_instantiator"}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float):
        return value
    return elided(str(value))


def front_matter(config: Mapping[str, Any], ckpt: Mapping[str, Any] | None,
                 metrics: Mapping[str, Any], license: str) -> dict[str, Any]:  # fmt: skip
    """The card's metadata (Hugging Face model card fields)."""
    method = (config.get("ncl_lightning") or {}).get("method") or ""
    data = ((ckpt or {}).get("datamodule_hyper_parameters") or {}).get("_class_path")
    dataset = hub_dataset(data)
    tags = ["ncl-lightning", "image-feature-extraction",
            config["class_path"].rpartition(".")[2].lower()]  # fmt: skip
    if method:
        tags.insert(1, method.rpartition(".")[2].lower())
    if "torchvision" in config:
        tags.append(config["torchvision"]["architecture"])
    return {
        "library_name": "timm" if "timm" in config else "pytorch",
        "license": license,
        "pipeline_tag": "image-feature-extraction",
        "tags": list(dict.fromkeys(tags)),
        "datasets": [dataset] if dataset else [],
        "metrics": ["accuracy"] if any("acc" in name for name in metrics) else [],
    }


def _keys_line(keymap: Mapping[str, Any]) -> str:
    keys = keymap.get("keys") or {}
    line = (f"`{keymap['library']}` `{keymap['architecture']}`: {keys.get('same')} of its "
            f"{keys.get('theirs')} keys are ours, name and shape")  # fmt: skip
    for what, label in (("missing", "not ours"), ("shape_differs", "other shape"),
                        ("unexpected", "ours only")):  # fmt: skip
        if keys.get(what):
            line += f"; {label}: " + ", ".join(f"`{k}`" for k in keys[what][:SHOWN_KEYS])
    return line + (f". {keymap['caveat']}." if keymap.get("caveat") else ".")


def _loading(config: Mapping[str, Any], files: Sequence[str]) -> list[str]:
    lines = ["```python", "from ncl_lightning import load_backbone",
             "", 'encoder = load_backbone("path/to/this/folder").eval()  # [B, C, H, W] -> '
             f"[B, {config.get('out_dim')}]", "```"]  # fmt: skip
    tv = config.get("torchvision")
    if tv:
        state = f'load_file("{WEIGHTS_FILE}")'
        if tv["prefix"]:
            state = f'{{k.removeprefix("{tv["prefix"]}"): v for k, v in {state}.items()}}'
        if TORCHVISION_FILE in files:
            state = f'torch.load("{TORCHVISION_FILE}", weights_only=True)'
        reader = ["from safetensors.torch import load_file"] if "load_file" in state else []
        lines += ["", "With torchvision alone (`fc` is ours: an `Identity`):", "", "```python",
                  "import torch", "import torchvision", *reader, "",
                  f'net = torchvision.models.get_model("{tv["architecture"]}", '
                  'weights=None)']  # fmt: skip
        if not tv["exact"] and config["class_path"].endswith("ResNet"):
            args = config["init_args"]
            lines += [f"net.conv1 = torch.nn.Conv2d({args.get('in_channels')}, 64, "
                      f"{3 if args.get('stem') == 'cifar' else 7}, "
                      f"{1 if args.get('stem') == 'cifar' else 2}, "
                      f"{args.get('stem_padding')}, bias=False)"]  # fmt: skip
            if args.get("stem") == "cifar":
                lines += ["net.maxpool = torch.nn.Identity()"]
        head = "net.fc = torch.nn.Identity()"
        if not tv["architecture"].startswith(("resnet", "resnext", "wide_resnet")):
            head = "# replace the classifier's last nn.Linear by torch.nn.Identity()"
        lines += [head, f"net.load_state_dict({state})", "```"]
    if "timm" in config:
        lines += [
            "",
            "With timm (this folder's `config.json` is timm's too):",
            "",
            "```python",
            "import timm",
            "",
            'net = timm.create_model("hf-hub:<user>/<repo>", pretrained=True)  # or',
            'net = timm.create_model("local-dir:path/to/this/folder", pretrained=True)',
        ]
        if "preprocessing" in config:
            lines += [
                "# the training run's evaluation transform (resize, crop, mean, std):",
                "cfg = timm.data.resolve_data_config({}, model=net)",
                "transform = timm.data.create_transform(**cfg)",
            ]
        lines += ["```"]  # fmt: skip
    pre = config.get("preprocessing")
    if pre:
        resize = (
            f"shorter side resized to {pre['resize']} ({pre['interpolation']}), "
            if (pre.get("resize"))
            else ""
        )
        lines += ["", f"Inputs as the training run evaluated them: {resize}centre crop "
                  f"{pre['input_size'][-1]} px, {pre['input_size'][0]} channels in [0, 1], "
                  f"normalised with mean {pre['mean']} and std {pre['std']} "
                  "(`config.json`, `preprocessing`)."]  # fmt: skip
    else:
        lines += [
            "",
            "The checkpoint records no input preprocessing (written before "
            "2026-11-30, or exported from Python): normalise as the training data was.",
        ]
    return lines


def model_card(config: Mapping[str, Any], ckpt: Mapping[str, Any] | None, path: Path | None,
               files: Sequence[str], license: str = "mit") -> str:  # fmt: skip
    """The ``README.md`` of an export.

    Args:
        config: The export's ``config.json``
            ([`export_config`][ncl_lightning.checkpoints.export.export_config]).
        ckpt: The checkpoint read (``None``: a backbone exported from Python).
        path: The checkpoint's file (for the run folder beside it).
        files: The files of the export.
        license: The card's ``license``.
    """
    ckpt = ckpt or {}
    source, metrics = final_metrics(ckpt, path) if path is not None else (None, {})
    meta = front_matter(config, ckpt, metrics, license)
    method = (config.get("ncl_lightning") or {}).get("method")
    backbone = config["class_path"].rpartition(".")[2]
    title = f"{method.rpartition('.')[2] + ' ' if method else ''}{backbone} backbone"
    lines = ["---", yaml.safe_dump(meta, sort_keys=False).strip(), "---", "", f"# {title}", "",
             f"Exported by ncl-lightning from `{path.name if path else 'a Python backbone'}`.",
             "", "## Model", "",
             f"- Backbone: `{config['class_path']}`, features `[B, {config.get('out_dim')}]`"
             " (no classifier); `init_args`: `" + inline(config["init_args"]) + "`."]  # fmt: skip
    if method:
        reference = method_reference(method)
        lines.append(f"- Method: `{method}`" + (f": {reference}" if reference else "."))
    if "epoch" in ckpt or "global_step" in ckpt:
        lines.append(f"- Checkpoint: epoch {ckpt.get('epoch')}, global step "
                     f"{ckpt.get('global_step')}.")  # fmt: skip
    if ckpt:
        hparams = {"model": plain(ckpt.get("hyper_parameters") or {}),
                   "data": plain(ckpt.get("datamodule_hyper_parameters") or {})}  # fmt: skip
        lines += ["", "## Training configuration", "",
                  "The checkpoint's hyper-parameters (`hyper_parameters`, "
                  "`datamodule_hyper_parameters`):", "", "```yaml",
                  yaml.safe_dump(hparams, sort_keys=False).strip(), "```"]  # fmt: skip
    lines += ["", "## Metrics", "", *_metrics_lines(source, metrics, monitored(ckpt))]
    code = run_code(ckpt, path) if path is not None else {}
    commit = code.get("commit") or "not recorded"
    dirty = " (with uncommitted changes)" if code.get("dirty") else ""
    lines += ["", "## Code", "",
              f"- Trained with ncl-lightning {code.get('version') or 'version not recorded'}, "
              f"commit `{commit}`{dirty}" + (" (from the run folder's `run.yaml`)." if code else
              " (no `run.yaml` of the run beside the checkpoint; the record carries none)."),
              f"- Lightning {ckpt.get('pytorch-lightning_version', 'version not recorded')}"
              f"{', torch ' + str(code['torch']) if code.get('torch') else ''}.",
              f"- Exported with ncl-lightning {package_version()}.",
              "", "## How to load", "", *_loading(config, files)]  # fmt: skip
    maps = [config[lib] for lib in ("torchvision", "timm") if lib in config]
    lines += ["", "## Key names", ""]
    if maps:
        lines += ["Our keys are the library's, measured at export:", ""]
        lines += [f"- {_keys_line(m)}" for m in maps]
    else:
        lines += ["No torchvision or timm model has this architecture here: load it with "
                  "`load_backbone`."]  # fmt: skip
    return "\n".join(lines) + "\n"


def _metrics_lines(source: str | None, metrics: Mapping[str, tuple],
                   best: Sequence[tuple[str, float]]) -> list[str]:  # fmt: skip
    if not metrics and not best:
        return ["None found: the checkpoint stores no logged metrics and no `metrics.csv` "
                "(CSVLogger) of its run lies beside it."]  # fmt: skip
    lines = []
    if metrics:
        lines += [f"From the {source}:", "", "| metric | value | epoch | step |",
                  "|---|---|---|---|"]  # fmt: skip
        for name in sorted(metrics)[:SHOWN_METRICS]:
            value, epoch, step = metrics[name]
            lines.append(f"| `{name}` | {value:.4g} | {epoch} | {step} |")
        if len(metrics) > SHOWN_METRICS:
            lines.append(f"\n({len(metrics) - SHOWN_METRICS} more columns in metrics.csv.)")
    for monitor, score in best:
        lines += ["", f"Best `{monitor}` monitored by ModelCheckpoint (from the checkpoint): "
                  f"{score:.4g}."]  # fmt: skip
    return lines


def package_version() -> str:
    """The installed ncl-lightning's version (``"unknown"`` when not installed)."""
    try:
        return importlib.metadata.version("ncl-lightning")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def inline(value: Any) -> str:
    """``value`` as one line of YAML flow style (``{depth: 18, stem: cifar}``)."""
    return yaml.safe_dump(plain(value), default_flow_style=True, width=10**6).strip()


__all__ = ["CARD_FILE", "final_metrics", "front_matter", "hub_dataset", "method_reference",
           "model_card", "monitored", "run_code"]  # fmt: skip
