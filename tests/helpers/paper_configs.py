"""The paper configs as ``ncl-cli`` resolves them, flattened to dotted leaves.

``tests/test_paper_configs.py`` checks every leaf against the table of ``docs/fidelity.md``
(:mod:`tests.helpers.fidelity`). A config is resolved by the parser ``ncl-cli`` itself
uses (:class:`ncl_lightning.runtime.cli.NCLCLI`: the same class lookup, defaults and
checks as ``ncl-cli <subcommand> --config X --print_config``), built once and asked once
per file, in-process: a subprocess per config would import torch and Lightning 40 times.

The augmentation preset a DataModule applies when ``data.init_args.augmentation`` is null
lives in code, not in the YAML; :func:`augmentation_leaves` exposes the effective training
views of a ``fit`` config as virtual leaves ``augmentation.<field>``.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from pathlib import Path
from typing import Any

import yaml
from lightning.pytorch import LightningDataModule, LightningModule

from ncl_lightning.runtime.cli import NCLCLI, TypedTrainer
from tests.conftest import ROOT

CONFIGS = ROOT / "configs"

# What "paper config" means (docs/fidelity.md, first section): the top-level configs, the
# supervised NCE/CE configs, the CIFAR-10/100 and ImageNet-100 evaluation configs, and the
# ground-truth studies. demo/, subset/ and the *_subset_* / digits_* evaluation configs are
# CPU-scale studies; ground_truth/overlays/ are ablations applied on top of a paper config,
# nce/overlays/ the NCL paper's Table 4 variants of the NCE/CE configs (not globbed).
PAPER_GLOBS = ("*.yaml", "nce/*.yaml", "eval/*.yaml", "ground_truth/*.yaml")
NOT_PAPER = re.compile(r"^eval/(cifar10_subset_|digits_)")

# The checkpoint a `test` config's command names (`--model.checkpoint <last.ckpt>`).
CHECKPOINT = "<last.ckpt>"

# The subcommand a config is run with, from the command its header comment shows.
COMMAND = re.compile(r"^#\s+ncl-cli (fit|test) ", re.MULTILINE)


def paper_config_names(root: Path = CONFIGS) -> list[str]:
    """Every paper config under ``root`` as ``<folder>/<stem>`` (``cifar10_ncl``,
    ``eval/cifar10_linear``), sorted; a new file matching :data:`PAPER_GLOBS` is one."""
    names = set()
    for pattern in PAPER_GLOBS:
        for path in root.glob(pattern):
            name = path.relative_to(root).with_suffix("").as_posix()
            if not NOT_PAPER.match(name):
                names.add(name)
    return sorted(names)


def subcommand(path: Path) -> str:
    """``fit`` or ``test``: the subcommand the config's header comment runs it with."""
    found = COMMAND.findall(path.read_text())
    if len(set(found)) != 1:
        raise AssertionError(f"{path}: the header must show one `ncl-cli fit|test` command")
    return found[0]


class _ParseOnly(NCLCLI):
    """``NCLCLI`` that parses and stops: no classes are built, nothing is run."""

    def _set_seed(self) -> None:
        """Leave the test process's random state alone."""

    def instantiate_classes(self) -> None:
        """Parsing is all the table needs."""

    def _run_subcommand(self, subcommand: str) -> None:
        """Nothing is run."""


class Resolver:
    """One ``ncl-cli`` parser, resolving config files to plain nested dicts."""

    def __init__(self, first: Path) -> None:
        cli = _ParseOnly(
            model_class=LightningModule,
            datamodule_class=LightningDataModule,
            subclass_mode_model=True,
            subclass_mode_data=True,
            trainer_class=TypedTrainer,
            args=["fit", "--config", str(first)],
            auto_configure_optimizers=False,
        )
        self.parser = cli.parser

    def __call__(self, path: Path, sub: str) -> dict[str, Any]:
        """The resolved ``<sub>`` section of ``path`` (what ``--print_config`` prints).

        A model that loads a pretrained checkpoint (evaluation protocols) is given the
        placeholder :data:`CHECKPOINT` as ``--model.checkpoint``, as its command does."""
        model = yaml.safe_load(path.read_text())["model"]["class_path"]
        takes = "checkpoint" in inspect.signature(_import(model)).parameters
        extra = ["--model.init_args.checkpoint", CHECKPOINT] if takes else []
        cfg = self.parser.parse_args([sub, "--config", str(path), *extra])
        return cfg[sub].clone().as_dict()


def leaves(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted leaves of a nested dict; a list is one leaf unless it holds dicts (then
    its items are ``key.<i>``)."""
    if isinstance(tree, dict):
        out: dict[str, Any] = {}
        for key, value in tree.items():
            out.update(leaves(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(tree, list) and any(isinstance(item, dict) for item in tree):
        out = {}
        for i, item in enumerate(tree):
            out.update(leaves(item, f"{prefix}.{i}"))
        return out
    return {prefix: tree}


def _import(class_path: str) -> type:
    module, _, name = class_path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def augmentation_leaves(cfg: dict[str, Any], sub: str) -> dict[str, Any]:
    """The training views of a config whose ``data.init_args.augmentation`` is null, as
    ``augmentation.<field>`` leaves (lists for tuples).

    The DataModule is built from its resolved arguments (constructors read no data) and
    its ``augmentation`` property gives the preset; ``train_transform: crop_flip`` keeps
    only its crop and flip (``SimCLRAugmentation.crop_flip``). ``blur_kernel`` is the
    kernel side the pipelines use (``blur_kernel_side``). A ``test`` config draws no
    training views: only the normalisation of its clean images (``mean``, ``std``) is
    given. Empty for DataModules without a preset.
    """
    data = cfg["data"]
    args = dict(data.get("init_args") or {})
    if "augmentation" not in args or args["augmentation"] is not None:
        return {}
    module = _import(data["class_path"])(**args)
    aug = module.augmentation
    if args.get("train_transform") == "crop_flip":
        aug = aug.crop_flip()
    fields = {f.name: getattr(aug, f.name) for f in dataclasses.fields(aug)}
    fields["blur_kernel"] = aug.blur_kernel_side
    if sub == "test":
        fields = {"mean": fields["mean"], "std": fields["std"]}
    return {
        f"augmentation.{name}": list(value) if isinstance(value, tuple) else value
        for name, value in fields.items()
    }
