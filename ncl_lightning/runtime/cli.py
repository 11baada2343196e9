"""``ncl-cli``: LightningCLI over every method and DataModule of the package.

Model and data are chosen by ``class_path`` (subclass mode); the DataModule's
``num_classes`` and ``batch_size`` are linked into the model, so a config states them once.
On top of LightningCLI: bad input stops the run in one line before anything is written
([`errors`][ncl_lightning.runtime.errors]), every run has its own folder and id
([`ncl_lightning.runtime.runs`][]), ``--ckpt_path last``/``--auto_resume`` resume this run
with the command line's values over the checkpoint's ([`ncl_lightning.runtime.resume`][]),
and checkpoints are read tensor-only and validated ([`check`][ncl_lightning.checkpoints.check]).
The promises and their tests: ``docs/reliability.md``.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Sequence
from functools import partialmethod
from pathlib import Path
from typing import Any

from jsonargparse.typing import NonNegativeFloat, PositiveInt, register_type
from lightning.pytorch import LightningDataModule, LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from ncl_lightning.checkpoints.check import class_paths_in, modules_of, run_record, trusting
from ncl_lightning.checkpoints.io import AtomicCheckpointIO
from ncl_lightning.checkpoints.load import RECORD_KEY, check_state_fits, read_checkpoint
from ncl_lightning.checkpoints.optimizer_groups import OptimizerGroupsCheck, ResumeOverrides
from ncl_lightning.checkpoints.record import same_class
from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.internals import (
    PlainHelpFormatter,
    override_ckpt_path_parsing,
    subcommand_parser,
)
from ncl_lightning.foundation.progress import library_notices_off
from ncl_lightning.foundation.protocols import ChecksInputs
from ncl_lightning.methods.record import run_identity
from ncl_lightning.methods.subclass_defaults import check_model_defaults
from ncl_lightning.methods.trainable import DATA_LINKED, TrainableModule
from ncl_lightning.runtime.console import (
    FitSummary,
    default_logger,
    progress_callbacks,
    summary_callbacks,
)
from ncl_lightning.runtime.errors import run_main
from ncl_lightning.runtime.failures import FailedRun
from ncl_lightning.runtime.resume import (
    continue_loggers,
    describe,
    overlay_explicit,
    resolve_ckpt_path,
    restore_csv_rows,
    split_explicit,
    typed_model_keys,
)
from ncl_lightning.runtime.runs import (
    MovedRun,
    RunConfig,
    RunLock,
    check_new_run,
    check_same_run,
    check_under_root,
    evaluation_folders,
    follow_root,
    keep_checkpoint_folders,
    place_checkpoints,
    run_id,
    set_logger_versions,
)
from ncl_lightning.runtime.signals import Preemption
from ncl_lightning.runtime.unknown_keys import check_keys


class Seed(int):
    """``--seed_everything``: ``true`` (Lightning's default seed), ``false`` (none) or an
    integer numpy takes (its own jsonargparse type: a bad value gets one reason, not a
    union's)."""


def _seed(value: object) -> bool | int:
    text = str(value).strip().lower()
    if isinstance(value, bool) or text in ("true", "false"):
        return value if isinstance(value, bool) else text == "true"
    try:
        seed = int(text)
    except ValueError:
        seed = -1
    if not 0 <= seed < 2**32 or isinstance(value, float):
        raise ConfigError(
            f"expected true, false or an integer in [0, 2**32 - 1], got {value!r}",
            key="seed_everything",
        )
    return seed


register_type(Seed, serializer=lambda value: value, deserializer=_seed)
# Model arguments naming the files a model loads its weights from: a model given one is
# trained (test/validate/predict need no --ckpt_path).
PATH_ARGUMENTS = ("checkpoint", "pretrained")

# The options ncl-cli adds: name -> (type, help); the default is false (run_id: none).
RUN_OPTIONS: dict[str, tuple[Any, str]] = {
    "auto_resume": (bool, "fit: resume this run's last.ckpt (--run_id, the SLURM job, or the "
                    "only run under the root) when there is one, else start afresh (for jobs "
                    "that are re-submitted after preemption)."),
    "run_id": (str | None, "The run's id and folder name (each logger's version, the W&B run "
               "id); resume takes this run's last.ckpt. fit default: $NCL_RUN_ID, else the "
               "SLURM job (slurm-<job> or slurm-<array job>_<task>), else the loggers' own."),
    "new_run": (bool, "fit with --ckpt_path: start a new run (its own folder and id) from the "
                "checkpoint's training state, instead of continuing the checkpoint's run; "
                "nothing of that run is touched."),
    "allow_untrained": (bool, "test/validate/predict: evaluate the model's initial (untrained) "
                        "weights when no --ckpt_path is given, instead of refusing."),
}  # fmt: skip


class HelpParser(LightningArgumentParser):
    """LightningCLI's parser whose ``--help`` shows the docstrings' mkdocs links as plain
    text; a class's help (``--model.help NCL``) is printed by a parser of this type too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", PlainHelpFormatter)
        super().__init__(*args, **kwargs)


@override_ckpt_path_parsing
class NCLCLI(LightningCLI):
    """LightningCLI with the data -> model links, resume and the checks of this package."""

    _args: Any = None  # the arguments given, parsed again without defaults on a resume
    _run_id: str | None = None
    _resume_checkpoint: dict[str, Any] | None = None
    _overrides: Sequence[Any] = ()  # the typed values that differ from the checkpoint's

    def add_default_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """``--seed_everything`` typed as numpy takes it (jsonargparse refuses another)."""
        parser.add_argument(
            "--seed_everything",
            type=Seed,
            default=self.seed_everything_default,
            help="An integer in [0, 2**32 - 1]: seed_everything with it before the classes "
            "are built; true: Lightning's seed_everything() without one (seed 0, or "
            "$PL_GLOBAL_SEED); false: no seeding.",
        )

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        for name in DATA_LINKED:  # num_classes, batch_size
            parser.link_arguments(f"data.{name}", f"model.init_args.{name}", apply_on="instantiate")
        for name, (kind, text) in RUN_OPTIONS.items():
            default = None if name == "run_id" else False
            parser.add_argument(f"--{name}", type=kind, default=default, help=text)

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """LightningCLI's parsing without its caution against ``args`` beside ``sys.argv``:
        [`cli_main`][]'s ``args`` replace ``sys.argv[1:]`` (scripts with their own argv)."""
        self._args = args
        tokens = sys.argv[1:] if args is None else args
        if not isinstance(tokens, dict):  # a typo is refused with the closest key
            at = next((i for i, t in enumerate(tokens) if t in self.subcommands()), None)
            if at is not None:
                sub = tokens[at]
                check_keys(subcommand_parser(self, sub), sub, tokens[at + 1 :], PUBLIC_PACKAGES)
        self.config = self._parse(defaults=True)

    def _parse(self, defaults: bool) -> Any:
        """The arguments given (a dict from Python, else the command line) parsed."""
        args = self._args
        parse = self.parser.parse_object if isinstance(args, dict) else self.parser.parse_args
        return parse(args, defaults=defaults)

    # -- before instantiation: resolve and check the checkpoint --------------------------
    def _subconfig(self) -> Any:
        sub = self.config.get("subcommand")
        return self.config[sub] if sub else self.config

    def _assign_run_id(self, sub: str, cfg: Any) -> str | None:
        """``--run_id``, else (fit) the environment's; a fit gives it to every logger."""
        found = run_id(cfg.get("run_id"), None if sub == "fit" else {})  # None: the environment
        if found is None:
            return None
        if sub == "fit":
            set_logger_versions(cfg["trainer"].get("logger"), found[0])
            rank_zero_info(f"Run id {found[0]} (from {found[1]})")
        return found[0]

    def _read_ckpt_path(self, lightning_parse: Callable[[], None]) -> None:
        """Resolve ``last``/``auto_resume``, read and validate the checkpoint before
        Lightning touches it, continue its loggers, then apply its hyper-parameters as
        Lightning does (``lightning_parse``) with the typed values over them. Run where
        LightningCLI parses ``--ckpt_path``
        ([`override_ckpt_path_parsing`][ncl_lightning.foundation.internals.override_ckpt_path_parsing])."""
        sub = self.config.get("subcommand")
        if not sub:
            return
        cfg = self.config[sub]
        default_logger(cfg["trainer"])  # CSV, without Lightning's note
        follow_root(cfg["trainer"])  # the run's folders, before anything searches them
        self._run_id = self._assign_run_id(sub, cfg)
        new_run = bool(cfg.get("new_run"))
        if new_run and (sub != "fit" or cfg.get("ckpt_path") in (None, "")):
            raise ConfigError(
                "new_run: starts a new fit from a checkpoint's state; use it with ncl-cli fit "
                "--ckpt_path <file or last>",
                key="new_run",
            )
        path = resolve_ckpt_path(cfg, sub, self._run_id)
        if path is None:
            return
        ckpt = read_checkpoint(path, trusted=self._config_modules())
        cfg["ckpt_path"] = str(path)
        if cfg.get("weights_only") is None:
            cfg["weights_only"] = True
        self._resume_checkpoint = ckpt
        configured = (cfg.get("model") or {}).get("class_path")
        if configured and not same_class(configured, ckpt[RECORD_KEY].get("method", "")):
            return  # checked with the model's keys in check_state_fits
        if sub == "fit" and not new_run:
            continue_loggers(cfg["trainer"].get("logger"), ckpt[RECORD_KEY].get("loggers", []))
        explicit = self._parse(defaults=False).get(f"{sub}.model")  # without the defaults
        lightning_parse()
        if explicit is None:
            return
        typed, from_files = split_explicit(explicit, typed_model_keys(self._args))
        model = self.config[f"{sub}.model"]
        self._overrides = overlay_explicit(model, typed, "model.")
        kept = overlay_explicit(model.clone(), from_files, "model.")
        verb = {"fit": "Starting a new run from" if new_run else "Resuming", "test": "Testing",
                "validate": "Validating", "predict": "Predicting with"}[sub]  # fmt: skip
        if self._overrides:
            rank_zero_info(
                f"{verb} {path} with the command line's values over the checkpoint's: "
                f"{describe(self._overrides)}"
            )
        if kept:
            rank_zero_info(
                f"{verb} {path} with the checkpoint's values over the config file's: "
                f"{describe(kept, kept=True)}; give a value on the command line to change it"
            )

    def before_instantiate_classes(self) -> None:
        """One folder per run ([`follow_root`][ncl_lightning.runtime.runs.follow_root],
        [`evaluation_folders`][ncl_lightning.runtime.runs.evaluation_folders])."""
        cfg = self._subconfig()
        if self.subcommand is None:  # a subcommand's layout was set before the search
            default_logger(cfg["trainer"])
        else:
            evaluation_folders(self.subcommand, cfg["trainer"], cfg.get("ckpt_path"))

    def instantiate_classes(self) -> None:
        """Build the objects trusting the modules the config names (an evaluation module
        reading a checkpoint of the user's own backbone)."""
        with trusting(self._config_modules()):
            super().instantiate_classes()
        check_model_defaults(self.model)  # defaults through **kwargs, which the CLI ignores

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """The trainer, with line progress instead of per-batch bars in a log file and the
        model summary of [`ModelTable`][ncl_lightning.runtime.console.ModelTable]; under
        ``fast_dev_run`` no ``ModelCheckpoint`` writes ``last.ckpt`` (Lightning skips its
        other saves then, not the one at the end of training)."""
        key = f"{self.subcommand}.trainer" if self.subcommand else "trainer"
        config = self.config_init.get(key) or {}
        self.trainer_defaults["callbacks"] += progress_callbacks(config) + summary_callbacks(config)
        try:
            trainer = super().instantiate_trainer(**{**kwargs, "enable_model_summary": False})
        except (TypeError, ValueError, ImportError) as err:  # Lightning refuses a value
            if isinstance(err, ConfigError):
                raise
            raise ConfigError(f"trainer: {err}", key="trainer") from err
        if trainer.fast_dev_run:
            for callback in trainer.checkpoint_callbacks:
                if isinstance(callback, ModelCheckpoint):
                    callback.save_last = False
        return trainer

    def _config_modules(self) -> list[str]:
        """Modules of the classes the config names (the checkpoint's, once merged, have
        passed [`read_checkpoint`][]'s check)."""
        return modules_of(p for _, p in class_paths_in(self._subconfig().as_dict()))

    # -- after instantiation, before anything runs ------------------------------------
    def _preflight(self, stage: str) -> None:
        """Checks that need the built objects; nothing has been written yet."""
        trainer, model, datamodule = self.trainer, self.model, self.datamodule
        cfg = self._subconfig()
        if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:
            trainer.strategy.checkpoint_io = AtomicCheckpointIO()
        if isinstance(datamodule, ChecksInputs):
            datamodule.check_inputs(stage, trainer.world_size)
        if isinstance(model, TrainableModule):  # the model's checks, before anything is written
            model.check_data(datamodule)
            if stage == "fit":
                model.check_fit(trainer, datamodule)
        if stage == "fit":
            check_sync_batchnorm(trainer, bool(cfg["trainer"].get("sync_batchnorm")))
        ckpt = self._resume_checkpoint
        if ckpt is not None:
            check_state_fits(ckpt, model, cfg["ckpt_path"])
            if stage != "fit":  # evaluations keep the run's checkpoint folder, no warning
                keep_checkpoint_folders(trainer.callbacks, ckpt)
        elif stage != "fit":
            self._check_trained(stage)
        if stage != "fit":
            return
        if ckpt is not None:  # a fit restores the optimizer state too
            trainer.callbacks.append(OptimizerGroupsCheck(ckpt, cfg["ckpt_path"]))
            if self._overrides:
                trainer.callbacks.append(ResumeOverrides())
        continues = ckpt is not None and not cfg.get("new_run")
        if not trainer.loggers:  # no logger folder: the run's own one under the root
            place_checkpoints(trainer, self._run_id, cfg["ckpt_path"] if continues else None)
        check_under_root(trainer)
        if continues:  # the checkpoint's run, in its own folder, or refused
            here, record = Path(run_identity(trainer)["folder"]), run_record(ckpt)
            check_same_run(record, cfg["ckpt_path"], here)
            if record is not None:  # a run moved whole keeps its checkpoint names
                trainer.callbacks.append(MovedRun(Path(record["folder"]), here))
        else:  # a new run never writes into a run's folder
            check_new_run(trainer, self._run_id)
        if rank_zero_only.rank == 0:  # last: every check has passed (other ranks share it)
            trainer.callbacks.append(RunLock.of(trainer).acquire())
        if continues:
            for logger in trainer.loggers:
                restore_csv_rows(logger, int(ckpt.get("global_step", 0)))

    def _check_trained(self, stage: str) -> None:
        """Refuse to evaluate initial weights unless asked to (``--allow_untrained``)."""
        cfg = self._subconfig()
        init_args = cfg.get("model.init_args") or {}
        if cfg.get("ckpt_path") or cfg.get("allow_untrained"):
            return
        if any(init_args.get(key) for key in PATH_ARGUMENTS):
            return  # the model loads trained weights itself
        raise ConfigError(
            f"ckpt_path: {stage} without a checkpoint would evaluate untrained weights; "
            "pass --ckpt_path <file> (or last), or --allow_untrained true"
        )

    before_fit = partialmethod(_preflight, "fit")
    before_validate = partialmethod(_preflight, "validate")
    before_test = partialmethod(_preflight, "test")
    before_predict = partialmethod(_preflight, "predict")


# Packages whose classes a config or the command line may name by their short name
# (jsonargparse finds a class among the loaded subclasses of the argument's type).
PUBLIC_PACKAGES = (
    "ncl_lightning.methods", "ncl_lightning.evaluation", "ncl_lightning.data",
    "ncl_lightning.callbacks", "ncl_lightning.atlas", "ncl_lightning.nn", "ncl_lightning.optim",
)  # fmt: skip
SUMMARY = (
    "ncl-lightning: interpretable self-supervised learning (CL, NCL, BayesNCL, NCE) with "
    "PyTorch Lightning; `ncl-cli --help` for an overview."
)


class TypedTrainer(Trainer):
    """Lightning's Trainer with types jsonargparse checks where Lightning does not: the batch
    limits keep the type the user wrote (``1`` one batch, ``1.0`` all of them; Lightning's
    ``float | int`` would read ``1`` as ``1.0``), and counts Lightning would divide by or
    silently accept are refused while parsing."""

    def __init__(
        self,
        *,
        limit_train_batches: int | float | None = None,
        limit_val_batches: int | float | None = None,
        limit_test_batches: int | float | None = None,
        limit_predict_batches: int | float | None = None,
        overfit_batches: int | float = 0.0,
        accumulate_grad_batches: PositiveInt = 1,  # type: ignore[assignment]
        check_val_every_n_epoch: PositiveInt | None = 1,  # type: ignore[assignment]
        gradient_clip_val: NonNegativeFloat | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            limit_train_batches=limit_train_batches,
            limit_val_batches=limit_val_batches,
            limit_test_batches=limit_test_batches,
            limit_predict_batches=limit_predict_batches,
            overfit_batches=overfit_batches,
            accumulate_grad_batches=int(accumulate_grad_batches),
            check_val_every_n_epoch=check_val_every_n_epoch,
            gradient_clip_val=gradient_clip_val,
            **kwargs,
        )


SYNC_BATCHNORM_DEVICES = ("cuda", "xpu", "hpu")  # where torch's SyncBatchNorm runs


def check_sync_batchnorm(trainer: Trainer, sync_batchnorm: bool) -> None:
    """A ``trainer.sync_batchnorm`` run with several processes needs a device torch's
    ``SyncBatchNorm`` runs on (it raises in the first training step otherwise).

    Raises:
        ConfigError: ``sync_batchnorm`` with several processes on another device type.
    """
    device = trainer.strategy.root_device.type
    if not sync_batchnorm or trainer.world_size < 2 or device in SYNC_BATCHNORM_DEVICES:
        return
    raise ConfigError(
        f"trainer.sync_batchnorm: SyncBatchNorm runs on GPUs only (torch supports "
        f"{', '.join(SYNC_BATCHNORM_DEVICES)}), and this run trains {trainer.world_size} "
        f"processes on {device}; set --trainer.sync_batchnorm false (each process then "
        "normalises by its own batch)",
        key="trainer.sync_batchnorm",
    )


def cli_main(args: list[str] | None = None) -> NCLCLI:
    """Run the CLI and return it (trainer, model and datamodule stay inspectable).

    Args:
        args: Replaces ``sys.argv[1:]``, e.g. ``["fit", "--config", "configs/cifar10_ncl.yaml"]``.

    Raises:
        PreemptedError: A ``SystemExit`` with status ``128 + signum`` when SIGTERM,
            SIGUSR1 or SIGINT stopped training (``last.ckpt`` saved).
        RankEndedError: A ``SystemExit`` with the status of the rank whose failure stopped
            this one under DDP ([`failures`][ncl_lightning.runtime.failures]).
        RunFaultError: A file of the run became unusable while it worked.
    """
    for package in PUBLIC_PACKAGES:  # short class names: --model NCL, --data DigitsDataModule
        importlib.import_module(package)
    preemption, failed = Preemption(), FailedRun()
    subs = {s: {"description": f"ncl-cli {s}: {SUMMARY}"} for s in NCLCLI.subcommands()}
    try:
        with library_notices_off():  # Lightning's tips and a torch notice about its code
            return NCLCLI(
                model_class=LightningModule,
                datamodule_class=LightningDataModule,
                subclass_mode_model=True,
                subclass_mode_data=True,
                save_config_callback=RunConfig,
                trainer_class=TypedTrainer,
                parser_class=HelpParser,
                # named in --help; no prefix matching: --trainer.max_epoch is an error
                parser_kwargs={"description": SUMMARY, "allow_abbrev": False, **subs},
                args=args,
                auto_configure_optimizers=False,
                trainer_defaults={"callbacks": [preemption, failed, FitSummary()]},
            )
    except (SystemExit, KeyboardInterrupt):
        if preemption.stop is not None:
            raise preemption.stop from None
        raise
    except Exception as err:
        ending = failed.ending(err)  # another rank's failure, or a file lost mid-run
        if ending is not None:
            raise ending from err
        raise


def main(args: list[str] | None = None) -> None:
    """Console entry point ``ncl-cli``: an error of ours is one line, exit status 2 (1 for
    faults during training) ([`errors`][ncl_lightning.runtime.errors]); jsonargparse prints
    its own parse errors (exit status 2).

    The current folder goes first on ``sys.path``, as ``python -m`` puts it: ``--model
    mypkg.MyNCL`` imports the user's module from the folder ``ncl-cli`` runs in."""
    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)
    run_main("ncl-cli", lambda: cli_main(args))


if __name__ == "__main__":
    main()
