"""docs/wandb.md is true: its key tables are exactly what real runs log to W&B.

The page's tables are machine-readable: a key table starts with a ``key`` column (the key
in backticks, ``{placeholder}`` s expanded by the placeholder table), a ``logged by``
column (job types in backticks, or the families *pre-training runs*, *classifier runs*,
*every run* of the run-kinds table) and a ``when`` column. The slow tests run the paper
configs for real through ``ncl-cli`` with W&B offline (tiny data and network, 3 training
steps, one epoch): BayesNCL ``fit`` and ``test``, CL, NCE, linear probe, fine-tuning, kNN,
feature selection (with a transfer set) and OOD. They read each ``run-<id>.wandb`` file
back (``tests.helpers.wandb_run``) and compare the history keys with the page, in both
directions.

Ignored: W&B's own ``_step``, ``_runtime`` and ``_timestamp`` (every key starting with
``_``), which W&B adds to every row. ``trainer/global_step`` and ``epoch`` are logged by
Lightning and are documented like any other key.

``train/skipped_nonfinite`` is logged only after a batch was skipped for a non-finite
loss, so three of the fits poison one batch (``NonFiniteBatch``) under
``nonfinite_loss: skip`` and expect it; the others must not log it.

The fast tests check that every W&B config follows the page's naming convention and has
the callback and optimiser settings the documented key names depend on.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import wandb
import yaml

from ncl_lightning.data import load_imagenet100_classes
from ncl_lightning.methods.record import run_folder
from ncl_lightning.runtime.cli import cli_main
from tests.conftest import ROOT
from tests.data.test_ood import CORRUPTIONS, make_ood_tree
from tests.fakes import make_image_folder
from tests.helpers.markdown import tables
from tests.helpers.wandb_run import OfflineRun, offline_runs, read_run

DOC = ROOT / "docs" / "wandb.md"
CONFIGS = ROOT / "configs"
AXES = ("trainer/global_step", "epoch")
RUN_DEPENDENT = ("stage", "k", "set")  # expanded from the run, not the placeholder table
FAMILIES = {"pre-training runs": "pre-training", "classifier runs": "classifier"}
WHEN = ("step", "epoch", "validation", "test", "every")
CONDITIONAL = "train/skipped_nonfinite"  # only after a skipped batch
STEPS = 3  # training batches of every fit below (one epoch, logged every step)
IMAGE = "images/separated"  # W&B's type of a logged image list
TABLE = "table-file"  # W&B's type of a logged wandb.Table


# -- the page -------------------------------------------------------------------------
def ticks(cell: str) -> list[str]:
    """The backticked tokens of a table cell."""
    return re.findall(r"`([^`]+)`", cell)


def md_tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """``(header, rows)`` of every pipe table of a markdown page (outside code blocks)."""
    return [(t.columns, t.body) for t in tables(text.splitlines())]


@dataclass(frozen=True)
class Kind:
    model: str
    family: str


@dataclass(frozen=True)
class Row:
    key: str
    logged_by: frozenset[str]
    when: str
    picture: bool

    def commands(self) -> set[str]:
        """``ncl-cli`` commands that log this key (the page's "which command" list)."""
        if self.key in AXES or self.key.startswith("{stage}/"):
            return {"fit", "test"}
        return {"test"} if self.key.startswith("test/") else {"fit"}


@cache
def page() -> str:
    return DOC.read_text(encoding="utf-8")


@cache
def run_kinds() -> dict[str, Kind]:
    """``job_type -> Kind`` from the run-kinds table."""
    (table,) = [rows for header, rows in md_tables(page()) if header[0] == "job_type"]
    return {ticks(r[0])[0]: Kind(r[2], r[4]) for r in table}


def logged_by(cell: str) -> frozenset[str]:
    """Job types named by a "logged by" / "for" cell."""
    kinds = run_kinds()
    if "every run" in cell:
        return frozenset(kinds)
    named = set(ticks(cell))
    assert named <= set(kinds), f"unknown job types {named - set(kinds)} in {cell!r}"
    for phrase, family in FAMILIES.items():
        if phrase in cell:
            named |= {job for job, kind in kinds.items() if kind.family == family}
    assert named, f"no job type in {cell!r}"
    return frozenset(named)


@cache
def key_rows() -> list[Row]:
    """Every row of every key table of the page."""
    rows = []
    for header, table in md_tables(page()):
        if header[0] != "key":
            continue
        col = {name: i for i, name in enumerate(header)}
        for r in table:
            (key,) = ticks(r[0])
            when = r[col["when"]].split()[0].rstrip(",")
            rows.append(Row(key, logged_by(r[col["logged by"]]), when, "picture" in col))
    return rows


@cache
def placeholders() -> dict[str, list[tuple[str, frozenset[str]]]]:
    """``name -> [(value, job types)]`` of the placeholders that the page fixes."""
    (table,) = [rows for header, rows in md_tables(page()) if header[0] == "placeholder"]
    out: dict[str, list[tuple[str, frozenset[str]]]] = {}
    for r in table:
        name = ticks(r[0])[0].strip("{}")
        if name not in RUN_DEPENDENT:
            out.setdefault(name, []).append((ticks(r[1])[0], logged_by(r[2])))
        else:
            out.setdefault(name, [])
    return out


def expand(key: str, job_type: str, command: str, values: dict[str, list[str]]) -> set[str]:
    """The keys a template stands for in one run (``values``: run-dependent ones)."""
    names = re.findall(r"\{(\w+)\}", key)
    choices = []
    for name in names:
        if name == "stage":
            choices.append(["val" if command == "fit" else "test"])
        elif name in RUN_DEPENDENT:
            assert name in values, f"{key}: the run gives no values for {{{name}}}"
            choices.append(values[name])
        else:
            choices.append([v for v, jobs in placeholders()[name] if job_type in jobs])
    out = set()
    for combo in itertools.product(*choices):
        expanded = key
        for name, value in zip(names, combo, strict=True):
            expanded = expanded.replace(f"{{{name}}}", value, 1)
        out.add(expanded)
    return out


def documented(
    job_type: str, command: str, values: dict[str, list[str]], skipped: bool
) -> dict[str, Row]:
    """``key -> row`` of every key the page says this run logs."""
    out = {}
    for row in key_rows():
        if job_type in row.logged_by and command in row.commands():
            out |= dict.fromkeys(expand(row.key, job_type, command, values), row)
    if not skipped:
        out.pop(CONDITIONAL, None)
    return out


def test_page_tables_are_well_formed() -> None:
    rows = key_rows()
    assert len(rows) > 50
    assert len({r.key for r in rows}) == len(rows), "a key is listed twice"
    used = {name for r in rows for name in re.findall(r"\{(\w+)\}", r.key)}
    assert used == set(placeholders()), "placeholders used and explained differ"
    assert all(r.when in WHEN for r in rows), sorted({r.when for r in rows} - set(WHEN))
    assert {k.family for k in run_kinds().values()} == {*FAMILIES.values(), "evaluation"}
    assert any(r.key == CONDITIONAL for r in rows)


# -- the convention: every config that logs to W&B ---------------------------------------
def _spec(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text()) or {}


def _logs_to_wandb(config: Path) -> bool:
    logger = (_spec(config).get("trainer") or {}).get("logger")
    loggers = logger if isinstance(logger, list) else [logger]
    assert len(loggers) == 1, f"{config}: several loggers; extend this test"
    return isinstance(loggers[0], dict) and (
        loggers[0].get("class_path") == "ncl_lightning.runtime.loggers.WandbLogger"
    )


WANDB_CONFIGS = sorted(c for c in CONFIGS.rglob("*.yaml") if _logs_to_wandb(c))
DATASETS = {
    "CIFAR10DataModule": "cifar10",
    "CIFAR100DataModule": "cifar100",
    "ImageNet100DataModule": "imagenet100",
    "ImageNetOODDataModule": "imagenet100",
}


def _short(class_path: str) -> str:
    return class_path.rsplit(".", 1)[-1]


def _callbacks(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    callbacks = spec["trainer"].get("callbacks") or []
    return {_short(c["class_path"]): c.get("init_args") or {} for c in callbacks}


@pytest.mark.parametrize("config", WANDB_CONFIGS, ids=lambda c: str(c.relative_to(CONFIGS)))
def test_wandb_config_follows_the_convention(config: Path) -> None:
    spec = _spec(config)
    logger = spec["trainer"]["logger"]["init_args"]
    model, data = spec["model"], _short(spec["data"]["class_path"])
    dataset = DATASETS[data]
    job_type = logger["job_type"]
    assert job_type in run_kinds(), f"job_type {job_type} is not in docs/wandb.md"
    kind = run_kinds()[job_type]
    assert ticks(kind.model)[0] == _short(model["class_path"])
    if job_type in ("ce", "nce"):
        assert model["init_args"]["loss"] == job_type
    assert (data == "ImageNetOODDataModule") == (job_type == "ood")
    assert config.stem.startswith(f"{dataset}_")
    assert logger["project"] == "ncl-lightning"
    assert logger["group"] == dataset + ("_supervised" if job_type in ("ce", "nce") else "")
    # the config's file name, which also names the run folder <save_dir>/<name>/<run id>
    assert logger["name"] == config.stem, logger["name"]
    parent = config.relative_to(CONFIGS).parent.as_posix()
    root = "runs" if parent == "." else f"runs/{parent}"
    assert logger["save_dir"] == spec["trainer"]["default_root_dir"] == root


def test_every_documented_job_type_has_a_wandb_config() -> None:
    used = {_spec(c)["trainer"]["logger"]["init_args"]["job_type"] for c in WANDB_CONFIGS}
    assert used == set(run_kinds())


@pytest.mark.parametrize("config", WANDB_CONFIGS, ids=lambda c: str(c.relative_to(CONFIGS)))
def test_wandb_config_logs_the_documented_key_names(config: Path) -> None:
    """The settings that key names depend on (``top100``, ``p@10``, ``lr-LARS/pg4``, ...)
    are those of the page, in every W&B config, not only in the ones the slow tests run."""
    spec = _spec(config)
    job_type = spec["trainer"]["logger"]["init_args"]["job_type"]
    family = run_kinds()[job_type].family
    callbacks, model = _callbacks(spec), spec["model"].get("init_args") or {}
    stats = callbacks.get("FeatureStatistics")
    assert (stats is not None) == (family == "pre-training" or job_type in ("ce", "nce"))
    if stats is not None:
        spaces = ["z", "h", "mask"] if job_type == "bayesncl" else ["z", "h"]
        assert (stats["spaces"], stats["top_k"], stats["retrieval_k"]) == (spaces, 100, 10)
        assert stats["sepin"] == (family == "pre-training")
        assert stats["every_n_epochs"] == 10
    pictures = callbacks.get("TopActivations")
    assert (pictures is not None) == (family == "pre-training")
    if pictures is not None:
        assert (pictures["space"], pictures["every_n_epochs"]) == ("z", 50)
    monitor = callbacks.get("LearningRateMonitor")
    assert (monitor is not None) == (family != "evaluation")
    if monitor is not None:
        assert monitor["logging_interval"] == "step"
        optimizer = _short(model["optimizer"]["class_path"])
        # LARS for pre-training and the CIFAR probes / fine-tuning (the releases'
        # optimisers); SGD for CE / NCE and the ImageNet-100 probe and fine-tuning.
        probe = family != "pre-training" and job_type not in ("ce", "nce")
        sgd = job_type in ("ce", "nce") or (probe and config.name.startswith("imagenet100"))
        # the ViT variants of the ImageNet-100 configs: AdamW (docs/fidelity.md, issue 36)
        vit = family == "pre-training" and config.stem.endswith("_vit")
        # the NCL paper's SCL runs (App. D.1, Table 5): the SCL release's SGD, which decays
        # every parameter (one group, then the online probe's)
        scl = config.stem.startswith("cifar10_spectral")
        assert optimizer == ("SGD" if sgd or scl else "AdamW" if vit else "LARS"), config
        assert model.get("exclude_bias_n_norm", True) is not scl  # the no-decay group pg2
    if job_type == "feature_selection":
        assert model["retrieval_k"] == 10


# -- real runs ----------------------------------------------------------------------------
@dataclass
class Logged:
    """One real run: its kind, what it logged, and the values of its run-dependent keys."""

    job_type: str
    command: str
    run: OfflineRun
    run_dir: Path  # the run's folder, <save_dir>/<name>/<run id> (docs/runs.md)
    config: str  # the config file's name
    skipped: bool = False
    values: dict[str, list[str]] = field(default_factory=dict)

    @property
    def keys(self) -> set[str]:
        return {k for k in self.run.keys if not k.startswith("_")}

    def expected(self) -> dict[str, Row]:
        return documented(self.job_type, self.command, self.values, self.skipped)


CPU = [
    "--trainer.accelerator", "cpu", "--trainer.devices", "1", "--trainer.strategy", "auto",
    "--trainer.precision", "32-true", "--trainer.enable_progress_bar", "false",
    "--trainer.enable_model_summary", "false",
]  # fmt: skip
NET = [
    "--model.init_args.backbone", "ncl_lightning.nn.SmallCNN",
    "--model.init_args.backbone.in_channels", "3", "--model.init_args.backbone.width", "8",
    "--model.init_args.backbone.out_dim", "32", "--model.init_args.channels_last", "false",
    "--model.init_args.proj_hidden_dim", "64", "--model.init_args.proj_output_dim", "32",
]  # fmt: skip
FIT = [
    "--trainer.max_epochs", "1", "--trainer.limit_train_batches", str(STEPS),
    "--trainer.limit_val_batches", "2", "--trainer.log_every_n_steps", "1",
    "--trainer.check_val_every_n_epoch", "1",
]  # fmt: skip
SKIP = [
    "--trainer.callbacks+=tests.helpers.wandb_run.NonFiniteBatch",
    "--model.init_args.nonfinite_loss", "skip",
]  # fmt: skip
KS = [8, 32]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Logged]:
    """Every run kind the page documents keys for, each a real offline W&B run."""
    tmp = tmp_path_factory.mktemp("wandb_docs")
    wnids = load_imagenet100_classes()[:5]  # 5 classes: top-5 keys are logged from C = 5
    images = make_image_folder(tmp / "data", wnids, n=8, size=(32, 32))
    transfer = make_image_folder(tmp / "transfer", ["x", "y", "z"], n=4, size=(32, 32))
    data = [
        "--data", "ncl_lightning.data.ImageFolderDataModule", "--data.root", str(images),
        "--data.batch_size", "8", "--data.num_workers", "0",
    ]  # fmt: skip
    out: dict[str, Logged] = {}

    def run(name: str, command: str, config: str, *extra: str, skipped: bool = False) -> Any:
        save = tmp / name
        args = [
            command, "--config", str(CONFIGS / config), *CPU,
            "--trainer.default_root_dir", str(save),
            "--trainer.logger.init_args.save_dir", str(save), *extra,
        ]  # fmt: skip
        cli = cli_main(args)
        wandb.finish()  # as at the end of a process: the next run is a new W&B run
        run_dir = run_folder(cli.trainer)
        # W&B's files: in the run's own folder (a test's: <checkpoint's run>/test/<id>/)
        (folder,) = offline_runs(run_dir)
        job_type = _spec(CONFIGS / config)["trainer"]["logger"]["init_args"]["job_type"]
        out[name] = Logged(job_type, command, read_run(folder), run_dir, Path(config).stem, skipped)
        return cli

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WANDB_MODE", "offline")
        mp.setenv("WANDB_SILENT", "true")
        wandb.finish()  # no run left open by an earlier test
        run("bayesncl", "fit", "cifar10_bayesncl.yaml", *data, *NET, *FIT, *SKIP, skipped=True)
        (pretrained,) = (tmp / "bayesncl").rglob("last.ckpt")
        ckpt = ["--ckpt_path", str(pretrained)]
        run("bayesncl_test", "test", "cifar10_bayesncl.yaml", *data, *NET, *ckpt)
        run("cl", "fit", "cifar10_cl.yaml", *data, *NET, *FIT)
        run("nce", "fit", "nce/cifar10_nce.yaml", *data, *NET, *FIT, *SKIP, skipped=True)
        evaluate = [*data, "--model.checkpoint", str(pretrained)]
        run("linear", "fit", "eval/cifar10_linear.yaml", *evaluate, *FIT)
        run("finetune", "fit", "eval/cifar10_finetune.yaml", *evaluate, *FIT, *SKIP, skipped=True)
        run("knn", "test", "eval/cifar10_knn.yaml", *evaluate)
        run(
            "feature_selection", "test", "eval/cifar10_feature_selection.yaml", *evaluate,
            "--model.init_args.ks", str(KS), "--model.init_args.probe_epochs", "2",
            "--model.init_args.transfer", "ncl_lightning.data.ImageFolderDataModule",
            "--model.init_args.transfer.root", str(transfer),
            "--model.init_args.transfer.batch_size", "4",
            "--model.init_args.transfer.num_workers", "0",
        )  # fmt: skip
        out["feature_selection"].values = {"k": [str(k) for k in KS]}
        (probe,) = (tmp / "linear").rglob("last.ckpt")
        class_list = tmp / "classes.txt"
        class_list.write_text("\n".join(wnids) + "\n")
        roots = make_ood_tree(tmp / "ood_data", wnids)
        cli = run(
            "ood", "test", "eval/imagenet100_ood.yaml",
            "--model.checkpoint", str(pretrained), "--ckpt_path", str(probe),
            *(a for key, root in roots.items() for a in (f"--data.init_args.{key}", root)),
            "--data.init_args.class_list", str(class_list),
            "--data.init_args.corruptions", str(CORRUPTIONS),
            "--data.init_args.severities", "[1, 3]",
            "--data.init_args.batch_size", "4", "--data.init_args.num_workers", "0",
        )  # fmt: skip
        out["ood"].values = {"set": list(cli.datamodule.test_names)}
    return out


RUNS = [
    "bayesncl", "bayesncl_test", "cl", "nce", "linear", "finetune", "knn",
    "feature_selection", "ood",
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("name", RUNS)
def test_logged_keys_are_the_documented_keys(runs: dict[str, Logged], name: str) -> None:
    logged = runs[name]
    expected = set(logged.expected())
    assert logged.keys - expected == set(), "logged but not in docs/wandb.md"
    assert expected - logged.keys == set(), "in docs/wandb.md but not logged"


@pytest.mark.slow
def test_every_documented_row_is_logged_by_a_run(runs: dict[str, Logged]) -> None:
    covered = {row for logged in runs.values() for row in logged.expected().values()}
    missing = [row.key for row in key_rows() if row not in covered]
    assert not missing, f"rows of docs/wandb.md that no test run logs: {missing}"
    for name, values in placeholders().items():
        for value, jobs in values:
            assert any(
                logged.job_type in jobs and any(value in key for key in logged.keys)
                for logged in runs.values()
            ), f"{{{name}}} = {value} is never logged"


@pytest.mark.slow
def test_cl_logs_what_bayesncl_logs_without_the_gate(runs: dict[str, Logged]) -> None:
    cl, bayes = runs["cl"].keys, runs["bayesncl"].keys - {CONDITIONAL}
    assert cl < bayes
    gate = {"train/contrastive", "train/kl", "train/gate/open_rate", "lr-LARS/pg4", "lr-LARS/pg5"}
    spaces = ("val/gate/", "val/mask/", "val/z_ungated/")  # the gate and what it gates
    assert bayes - cl == gate | {k for k in bayes if k.startswith(spaces)}
    assert not {k for k in cl if "gate" in k or "/mask/" in k or k.endswith("/kl")}


@pytest.mark.slow
@pytest.mark.parametrize("name", RUNS)
def test_when_column_matches_the_history(runs: dict[str, Logged], name: str) -> None:
    """One epoch of 3 logged steps: "step" keys are in 3 rows, the others in 1."""
    logged = runs[name]
    for key, row in logged.expected().items():
        if row.when == "every":
            continue
        count = len(logged.run.rows_with(key))
        assert count == (STEPS if row.when == "step" else 1), f"{key} ({row.when}): {count}"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bayesncl", "bayesncl_test", "cl"])
def test_pictures_are_images_in_wandb_and_on_disk(runs: dict[str, Logged], name: str) -> None:
    logged = runs[name]
    stage = "val" if logged.command == "fit" else "test"
    pictures = {key: row for key, row in logged.expected().items() if row.picture}
    assert len(pictures) == 4
    run_dir = logged.run_dir
    assert run_dir.name == logged.run.run.run_id  # the W&B run id names the folder
    for key in pictures:
        (image,) = [row[key] for row in logged.run.rows_with(key)]
        assert image["_type"] == IMAGE and image["count"] == 1
        (media,) = image["filenames"]
        assert media.startswith(f"media/images/{key}_") and media.endswith(".png")
        assert (logged.run.folder / "files" / media).is_file()
        name_ = key.rsplit("/", 1)[1]
        epoch = "001" if stage == "val" else "000"  # after the one-epoch fit; a test: 0
        assert (run_dir / "pictures" / f"{stage}_z_epoch{epoch}_{name_}.png").is_file()
    for key in logged.keys - set(pictures):  # numbers, and the per-dimension table
        kind = TABLE if key == f"{stage}/z/dimensions" else None
        assert logged.run.media_type(key) == kind, f"{key} is {logged.run.media_type(key)}"


@pytest.mark.slow
@pytest.mark.parametrize("name", RUNS)
def test_runs_carry_the_config_names(runs: dict[str, Logged], name: str) -> None:
    """The W&B run record holds the config's project, group, job type and name."""
    logged = runs[name]
    record = logged.run.run
    assert record.job_type == logged.job_type
    assert record.project == "ncl-lightning"
    assert record.display_name == logged.config  # an evaluation keeps it too
    assert record.display_name.startswith(record.run_group.removesuffix("_supervised") + "_")
