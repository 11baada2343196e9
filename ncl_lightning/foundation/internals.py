"""The one module that touches private or undocumented APIs of Lightning and wandb.

Every other module calls the small functions here. When an upgrade moves one of these
names, [`missing_private_apis`][] lists it and the test suite fails with a message naming
the name and this module (``tests/foundation/test_internals.py``). What is used, and why:

* ``hparams_mixin._given_hyperparameters``: set while LightningCLI builds a module, so it
  tells a module built by ``ncl-cli`` from one built in Python ([`built_by_cli`][],
  [`outside_cli`][]).
* ``HyperparametersMixin._hparams_initial``: the hyper-parameters the loggers write
  ([`record_hparams`][]).
* ``Trainer.fit_loop`` (``_FitLoop``, ``_TrainingEpochLoop``): ``setup_data`` and the
  progress counters ([`build_train_loader`][], [`batches_processed`][], ...).
* ``LightningCLI._parse_ckpt_path`` ([`override_ckpt_path_parsing`][]).
* ``LightningCLI._parser``: a subcommand's parser ([`subcommand_parser`][]).
* ``argparse.HelpFormatter._split_lines`` and ``_fill_text``: where ``--help`` text is
  wrapped, so the docstrings' mkdocs links read as plain text ([`PlainHelpFormatter`][]).
* ``Trainer._logger_connector`` ([`logs_this_step`][]).
* ``Trainer._signal_connector.received_sigterm``: the flag Lightning's loops stop on at the
  next batch end ([`stop_at_batch_end`][]; set on every rank at once under DDP).
* ``_SubprocessScriptLauncher.procs``: the processes Lightning's ``ddp`` launcher started
  ([`launched_processes`][]).
* ``wandb.proto.wandb_internal_pb2.Record`` and the layout of an offline run's ``.wandb``
  file (wandb has no reader): the numbers the plot draws ([`history_rows`][]) and the
  run's name in its legend ([`run_name`][]).
"""

from __future__ import annotations

import importlib
import json
import math
import re
import struct
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from jsonargparse import DefaultHelpFormatter
from lightning.pytorch.core.mixins import hparams_mixin

from ncl_lightning.foundation.errors import DataError

#: ``(module, attribute)`` of every private name the package relies on.
PRIVATE_APIS: tuple[tuple[str, str], ...] = (
    ("lightning.pytorch.core.mixins.hparams_mixin", "_given_hyperparameters"),
    ("lightning.pytorch.cli", "LightningCLI._parse_ckpt_path"),
    ("lightning.pytorch.cli", "LightningCLI._parser"),
    ("argparse", "HelpFormatter._split_lines"),
    ("argparse", "HelpFormatter._fill_text"),
    ("lightning.pytorch.loops.fit_loop", "_FitLoop"),
    ("lightning.pytorch.loops.training_epoch_loop", "_TrainingEpochLoop"),
    ("wandb.proto.wandb_internal_pb2", "Record"),
    ("lightning.pytorch.trainer.trainer", "Trainer._logger_connector"),
    ("lightning.pytorch.trainer.trainer", "Trainer._signal_connector"),
    ("lightning.pytorch.strategies.launchers.subprocess_script", "_SubprocessScriptLauncher.procs"),
    ("torch.cpu", "_is_avx512_bf16_supported"),
    ("torch.cpu", "_is_amx_tile_supported"),
)
# Keyword arguments of the fresh instance an instance attribute is looked up on, for the
# classes that need some (by ``module:class``).
_INSTANCE_KWARGS: dict[str, dict[str, Any]] = {
    "lightning.pytorch.trainer.trainer:Trainer": {"logger": False},
    "lightning.pytorch.strategies.launchers.subprocess_script:_SubprocessScriptLauncher": {
        "cluster_environment": None,
        "num_processes": 1,
        "num_nodes": 1,
    },
}


def missing_private_apis() -> list[str]:
    """``module:attribute`` of each entry of ``PRIVATE_APIS`` the installed versions lack.

    An attribute the class does not have is looked up on an instance built without
    arguments (``Trainer._logger_connector`` is set in ``__init__``). The fit-loop counters
    need a running loop; the test reads them off a real run."""
    missing = []
    for module_name, dotted in PRIVATE_APIS:
        try:
            owner: Any = importlib.import_module(module_name)
            *path, last = dotted.split(".")
            for part in path:
                owner = getattr(owner, part)
            if not hasattr(owner, last) and isinstance(owner, type):
                owner = owner(**_INSTANCE_KWARGS.get(f"{module_name}:{'.'.join(path)}", {}))
            getattr(owner, last)
        except (ImportError, AttributeError, TypeError, ValueError):
            missing.append(f"{module_name}:{dotted}")
    return missing


# -- the module's trainer ------------------------------------------------------------------
def attached_trainer(module: Any) -> Any | None:
    """The trainer ``module`` is attached to, or ``None`` (a module used without one):
    Lightning's ``module.trainer`` raises then."""
    try:
        return module.trainer
    except RuntimeError:
        return None


# -- LightningCLI's --ckpt_path parsing ------------------------------------------------
#: LightningCLI's private method that reads ``--ckpt_path``'s hyper-parameters into the config.
PARSE_CKPT_PATH = "_parse_ckpt_path"


def override_ckpt_path_parsing(cls: type) -> type:
    """Class decorator of a LightningCLI subclass: its ``_read_ckpt_path(lightning)`` runs
    where LightningCLI parses ``--ckpt_path`` (the private ``_parse_ckpt_path``, before the
    classes are built); ``lightning()`` is LightningCLI's own parsing."""

    def parse_ckpt_path(self: Any) -> None:
        self._read_ckpt_path(getattr(super(cls, self), PARSE_CKPT_PATH))

    parse_ckpt_path.__doc__ = cls._read_ckpt_path.__doc__  # type: ignore[attr-defined]
    setattr(cls, PARSE_CKPT_PATH, parse_ckpt_path)
    return cls


def subcommand_parser(cli: Any, subcommand: str) -> Any:
    """The jsonargparse parser of a LightningCLI ``subcommand`` (``fit``, ``test``, ...)."""
    return cli._parser(subcommand)


# -- --help text ------------------------------------------------------------------------------
_CROSS_REFERENCE = re.compile(r"\[([^\]]+)\]\[[^\]]*\]")  # [`text`][target], [text][]
_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")  # [text](url)


def plain_help(text: str) -> str:
    """A docstring's text as a terminal shows it: mkdocs cross-references become their
    text, Markdown links ``text (url)``, reST literals single backticks."""
    text = _CROSS_REFERENCE.sub(r"\1", text)
    text = _LINK.sub(r"\1 (\2)", text)
    return text.replace("``", "`")


class PlainHelpFormatter(DefaultHelpFormatter):
    """jsonargparse's help formatter, with [`plain_help`][] applied before the text is
    wrapped (``--help``, ``--model.help NCL``)."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return super()._split_lines(plain_help(text), width)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return super()._fill_text(plain_help(text), width, indent)

    def start_section(self, heading: str | None) -> None:
        super().start_section(heading and plain_help(heading))  # a group's title


# -- checkpoint paths -----------------------------------------------------------------------
def is_local_path(path: Any) -> bool:
    """Whether ``path`` is on the local file system (no ``s3://``-like protocol), as
    Lightning's checkpoint I/O decides."""
    from fsspec.utils import get_protocol

    return get_protocol(str(path)) == "file"


# -- the step's logging --------------------------------------------------------------------
def logs_this_step(trainer: Any) -> bool:
    """Whether Lightning writes this training step's logged values to the loggers
    (every ``log_every_n_steps``): a step that does not log need not call ``self.log``."""
    return bool(trainer._logger_connector.should_update_logs)


# -- stopping a run ---------------------------------------------------------------------------
def stop_at_batch_end(trainer: Any) -> None:
    """Have Lightning's loops stop at the end of this batch (training: after it completed;
    validation: at the next batch), as on SIGTERM: they raise ``SIGTERMException``."""
    trainer._signal_connector.received_sigterm = True


def cpu_computes_bf16() -> bool:
    """Whether this CPU has bfloat16 arithmetic units (AVX512-BF16 or AMX); without them
    torch emulates bf16 matrix products, slower than float32."""
    import torch

    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


def launched_processes(trainer: Any) -> list[Any]:
    """The ``subprocess.Popen`` of the ranks Lightning's ``ddp`` launcher started from this
    process (none on other ranks, or when the cluster started the processes)."""
    return list(getattr(trainer.strategy.launcher, "procs", None) or [])


# -- LightningCLI's hyper-parameter hand-over ------------------------------------------
def built_by_cli() -> bool:
    """Whether the module being constructed now is built by LightningCLI from a config."""
    return hparams_mixin._given_hyperparameters.get() is not None


def record_hparams(module: Any, **values: Any) -> None:
    """Set hyper-parameters a module learns at ``setup`` (from the attached DataModule) in
    its ``hparams`` and in the private ``_hparams_initial`` copy the loggers write and
    compare with the DataModule's (Lightning refuses a key both have with two values)."""
    module.hparams.update(values)
    initial = getattr(module, "_hparams_initial", None)
    if initial is not None:
        initial.update(values)


@contextmanager
def outside_cli() -> Iterator[None]:
    """Build modules as from Python: clears LightningCLI's hand-over for the block (loading
    a checkpoint while ``ncl-cli`` builds another module)."""
    token = hparams_mixin._given_hyperparameters.set(None)
    try:
        yield
    finally:
        hparams_mixin._given_hyperparameters.reset(token)


# -- fit-loop progress ------------------------------------------------------------------
def build_train_loader(trainer: Any) -> None:
    """Build the trainer's training loader when Lightning has not yet: what
    ``trainer.estimated_stepping_batches`` does for a ``max_epochs`` run, but not for a
    ``Trainer(max_steps=N)`` one, through the fit loop's ``setup_data``."""
    if trainer.train_dataloader is None:
        trainer.fit_loop.setup_data()


def epochs_processed(trainer: Any) -> int:
    """Training epochs Lightning has started processing (0 without a trainer)."""
    return int(trainer.fit_loop.epoch_progress.current.processed) if trainer else 0


def batches_processed(trainer: Any) -> int:
    """Batches of the current training epoch processed so far."""
    return int(trainer.fit_loop.epoch_loop.batch_progress.current.processed)


def batches_fetched_total(trainer: Any) -> int:
    """Training batches fetched over the whole run (restored on resume; 0 without trainer)."""
    return int(trainer.fit_loop.epoch_loop.batch_progress.total.ready) if trainer else 0


def batches_completed_total(trainer: Any) -> int:
    """Training batches completed over the whole run (restored on resume)."""
    return int(trainer.fit_loop.epoch_loop.batch_progress.total.completed)


def batch_index(trainer: Any) -> int:
    """Index of the training batch being processed in its epoch."""
    return int(trainer.fit_loop.epoch_loop.batch_idx)


# -- wandb's offline run file: a 7-byte header (b":W&B", magic 0xBEE1, version 0), then 32 KiB
# blocks of chunks, each a 7-byte header (CRC-32 of type byte and data, data length, type: 1 full,
# 2 first, 3 middle, 4 last) and its data; a record is one ``Record`` protobuf (LevelDB's log).
WANDB_FILE_HEADER = struct.pack("<4sHB", b":W&B", 0xBEE1, 0)
_BLOCK, _CHUNK = 32 * 1024, struct.Struct("<IHB")


def record_payloads(path: Path) -> Iterator[bytes]:
    """The serialized records of a ``run-<id>.wandb`` file, in the order written; stops at a
    chunk cut short or failing its CRC (a run killed while writing). ``DataError``: not one."""
    data = Path(path).read_bytes()
    if not data.startswith(WANDB_FILE_HEADER):
        raise DataError(f"{path}: not a W&B run file (header {data[:7]!r})")
    pos, pending = len(WANDB_FILE_HEADER), bytearray()
    while pos + _CHUNK.size <= len(data):
        left = _BLOCK - pos % _BLOCK
        crc, length, kind = _CHUNK.unpack_from(data, pos)
        if left < _CHUNK.size or crc == length == kind == 0:  # block padding, zero fill
            pos += left
            continue
        chunk = data[pos + _CHUNK.size : pos + _CHUNK.size + length]
        if len(chunk) != length or zlib.crc32(chunk, zlib.crc32(bytes([kind]))) != crc:
            return
        pos += _CHUNK.size + length
        if kind in (1, 4):  # full, last
            yield bytes(chunk if kind == 1 else pending + chunk)
        else:  # first, middle
            pending = bytearray(chunk) if kind == 2 else pending + chunk


def _history_number(item: Any) -> float | None:
    """A history item's value as a float, or None (media, text, lists, dicts)."""
    if (field := item.WhichOneof("value")) in ("integer", "number", "boolean"):
        return float(getattr(item, field))
    try:
        value = json.loads(item.value_json) if field is None and item.value_json else None
    except ValueError:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return math.nan if value in ("NaN", "nan") else None


def history_rows(path: Path) -> list[dict[str, float]]:
    """The numbers of every history row (``wandb.log`` call) of a ``run-<id>.wandb`` file:
    ``{key: value}`` without W&B's own ``_…`` keys, media or tables; a file cut short is read
    up to its last whole record ([`record_payloads`][]; ``DataError``: not a run file, or a
    record that does not decode)."""
    from google.protobuf.message import DecodeError
    from wandb.proto import wandb_internal_pb2 as pb

    rows = []
    for i, payload in enumerate(record_payloads(path)):
        record = pb.Record()
        try:
            record.ParseFromString(payload)
        except DecodeError as err:  # a whole chunk (its CRC holds) that is no record
            raise DataError(f"{path}: record {i} is not a W&B record ({err})") from None
        if record.WhichOneof("record_type") == "history":
            items = [(i.key or "/".join(i.nested_key), _history_number(i), len(i.nested_key))
                     for i in record.history.item]  # fmt: skip
            rows.append({k: v for k, v, depth in items if v is not None and not k.startswith("_")
                         and depth <= 1})  # fmt: skip
    return rows


def run_name(path: Path) -> str | None:
    """The run's name (``wandb.init(name=...)``, W&B's display name) in the run record of a
    ``run-<id>.wandb`` file, or None without one (``DataError``: not a run file)."""
    from google.protobuf.message import DecodeError
    from wandb.proto import wandb_internal_pb2 as pb

    for payload in record_payloads(path):
        record = pb.Record()
        try:
            record.ParseFromString(payload)
        except DecodeError:  # history_rows names it; the name is in the first records
            continue
        if record.WhichOneof("record_type") == "run":
            return record.run.display_name or None
    return None
