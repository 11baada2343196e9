"""The one module that touches private or undocumented APIs of Lightning, jsonargparse and
wandb.

Every other module calls the small functions here. When an upgrade moves one of these
names, [`missing_private_apis`][] lists it and the test suite fails with a message naming
the name and this module (``tests/foundation/test_internals.py``), instead of a run failing
later in some unrelated place.

What is used, and why:

* ``lightning.pytorch.core.mixins.hparams_mixin._given_hyperparameters``: the parsed
  config LightningCLI hands to ``save_hyperparameters`` while it builds a module. Whether it
  is set tells a module built by ``ncl-cli`` (its hyper-parameters are the config, class
  paths included) from one built in Python; loading a nested checkpoint must clear it.
* ``HyperparametersMixin._hparams_initial``: the copy of the hyper-parameters the loggers
  write; values a module fills in from the DataModule at ``setup`` (``batch_size``,
  ``num_classes``) are recorded there too ([`record_hparams`][]).
* ``LightningModule._trainer``: the trainer a module is attached to, or ``None``
  ([`attached_trainer`][]); the public ``module.trainer`` raises without one.
* ``Trainer.fit_loop.setup_data``: builds the training loader a ``max_steps`` run has not
  built yet, so the schedule knows the steps of an epoch ([`build_train_loader`][]).
* ``Trainer.fit_loop`` progress counters: the epoch and the batch a training epoch is at,
  for the exact mid-epoch resume of the DataModules and for naming the step in errors.
* ``LightningCLI._parse_ckpt_path``: overridden by ``ncl-cli`` to read a checkpoint safely
  and lay the user's values over its hyper-parameters ([`override_ckpt_path_parsing`][]).
* ``ArgumentParser._actions`` (argparse's, inherited by jsonargparse) and
  ``ActionTypeHint._typehint``: the options of a parser ([`parser_actions`][]), and the
  type jsonargparse reads an option's value as ([`action_typehint`][],
  [`set_action_typehint`][]).
* ``lightning.fabric.utilities.cloud_io._is_local_file_protocol``: whether a checkpoint
  path is on the local file system ([`is_local_path`][]).
* ``Trainer._logger_connector`` and ``Precision._wrap_closure``: where a training step's
  logging and its optimiser closure run, timed by ``python -m ncl_lightning.bench``
  ([`logger_connector`][], ``CLOSURE_WRAPPER``).
* ``torch.utils._python_dispatch.TorchDispatchMode``: the base of the operation counter of
  ``python -m ncl_lightning.bench`` (``TorchDispatchMode``); ``torch.nn.modules.
  batchnorm._NormBase``: the base of every BatchNorm and InstanceNorm layer
  (``NormBase``).
* ``wandb.sdk.wandb_setup`` and ``wandb.sdk.lib.wbauth``: wandb's settings and API-key
  lookup, without network, to fall back to offline logging before ``wandb.init`` hangs.
* ``wandb.proto.wandb_internal_pb2.Record`` and the layout of an offline run's ``.wandb`` file
  (undocumented; wandb 0.31 has no reader): the numbers the plot draws ([`history_rows`][]).

Message formats relied on (``MESSAGE_FORMATS``, read by ``runtime/cli_errors.py``):
jsonargparse reports a bad config as plain text. Its ``ArgumentError`` is built as
``ArgumentError(None, message)`` and the type errors under it are plain ``ValueError``s,
so no attribute carries the key, the value or the choices (jsonargparse 4.53); the one
line ``ncl-cli`` prints is read off these formats:

* argparse/jsonargparse: ``unrecognized arguments: --key``, ``Subcommand 'fit' does not
  accept option 'key'``, ``Option 'key' is not accepted`` (``Key 'key' is not expected``
  in older versions).
* jsonargparse's nested report: ``Parser key "key":``, ``Problem with given class_path
  'a.B':``, ``Type ... expects a function or a callable class: Parser key "key":``,
  ``Expected a <type>. Got value: v``, ``Expected a typing.Literal[...]``, ``Expected a
  path but X either not accessible or invalid`` (an unknown short class name), the Union report
  (``Does not validate against any of the Union subtypes``, ``Subtypes: [...]``,
  ``Errors:``, ``Given value type:``, ``Given value: v``, ``Given value:
  Namespace(class_path='a.B', ...``) and the reprs in it (``<class 'a.B'>``,
  ``typing.Literal[...]``).
* Python's import errors inside it: ``module 'a' has no attribute 'B'``, ``No module named
  'a'``.
* PyTorch's DataLoader worker re-raise: ``Original Traceback`` and a last line
  ``SomeError: message``.

``tests/foundation/test_internals.py`` produces each with a real parser and real bad values,
and names the pattern and the observed message when one no longer matches.
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

from lightning.pytorch.core.mixins import hparams_mixin
from torch.nn.modules.batchnorm import _NormBase
from torch.utils import _python_dispatch

from ncl_lightning.foundation.errors import DataError

#: ``(module, attribute)`` of every private name the package relies on.
PRIVATE_APIS: tuple[tuple[str, str], ...] = (
    ("lightning.pytorch.core.mixins.hparams_mixin", "_given_hyperparameters"),
    ("lightning.pytorch.cli", "LightningCLI._parse_ckpt_path"),
    ("lightning.pytorch.loops.fit_loop", "_FitLoop"),
    ("lightning.pytorch.loops.training_epoch_loop", "_TrainingEpochLoop"),
    ("wandb.sdk.wandb_setup", "singleton"),
    ("wandb.sdk.lib.wbauth", "authenticate_session"),
    ("wandb.proto.wandb_internal_pb2", "Record"),
    ("lightning.pytorch.core.module", "LightningModule._trainer"),
    ("jsonargparse", "ArgumentParser._actions"),
    ("jsonargparse._typehints", "ActionTypeHint._typehint"),
    ("lightning.fabric.utilities.cloud_io", "_is_local_file_protocol"),
    ("lightning.pytorch.trainer.trainer", "Trainer._logger_connector"),
    ("lightning.pytorch.plugins.precision", "Precision._wrap_closure"),
    ("lightning.pytorch.strategies", "DDPStrategy._layer_sync"),
    ("torch.utils._python_dispatch", "TorchDispatchMode"),
    ("torch.nn.modules.batchnorm", "_NormBase"),
)
#: The base class of every BatchNorm and InstanceNorm layer (``BatchNorm*``, ``SyncBatchNorm``,
#: ``InstanceNorm*``).
NormBase = _NormBase
#: The base of a mode that sees every operation torch dispatches (the bench's op counter).
TorchDispatchMode = _python_dispatch.TorchDispatchMode

# Keyword arguments of the fresh instance an instance attribute is looked up on, for the
# classes that need some (by ``module:class``).
_INSTANCE_KWARGS: dict[str, dict[str, Any]] = {
    "jsonargparse._typehints:ActionTypeHint": {"typehint": int},
    "lightning.pytorch.trainer.trainer:Trainer": {"logger": False},
}


def missing_private_apis() -> list[str]:
    """``module:attribute`` of each entry of ``PRIVATE_APIS`` the installed versions lack.

    An attribute the class does not have is looked up on an instance built without
    arguments (``LightningModule._trainer`` is set in ``__init__``). The fit-loop counters
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
    """The trainer ``module`` is attached to, or ``None`` (a module used without one).

    Lightning's public ``module.trainer`` raises when there is none; the attribute behind
    it, ``LightningModule._trainer``, is ``None`` then."""
    return module._trainer


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


# -- parsers' options ---------------------------------------------------------------------
def parser_actions(parser: Any) -> list[Any]:
    """The options of an (argparse or jsonargparse) parser: argparse's ``_actions``."""
    return list(getattr(parser, "_actions", []))


def action_typehint(action: Any) -> Any | None:
    """The type jsonargparse reads an option's value as (``None`` for an action that is not
    a jsonargparse ``ActionTypeHint``)."""
    return getattr(action, "_typehint", None)


def set_action_typehint(action: Any, typehint: Any) -> None:
    """Make jsonargparse read an option's value as ``typehint``."""
    action._typehint = typehint


# -- checkpoint paths -----------------------------------------------------------------------
def is_local_path(path: Any) -> bool:
    """Whether ``path`` is on the local file system (no ``s3://``-like protocol), as
    Lightning's checkpoint I/O decides."""
    from lightning.fabric.utilities.cloud_io import _is_local_file_protocol

    return _is_local_file_protocol(path)


# -- the training step's timed parts (python -m ncl_lightning.bench) ------------------------
#: The precision plugin's method that wraps the optimiser closure (zero_grad, training_step,
#: backward) around ``optimizer.step``.
CLOSURE_WRAPPER = "_wrap_closure"


def logger_connector(trainer: Any) -> Any:
    """The trainer's logger connector, whose ``on_batch_start``/``on_batch_end`` run the
    step's logging."""
    return trainer._logger_connector


def logs_this_step(trainer: Any) -> bool:
    """Whether Lightning writes this training step's logged values to the loggers
    (every ``log_every_n_steps``): a step that does not log need not call ``self.log``."""
    return bool(trainer._logger_connector.should_update_logs)


# -- the strategy's layer sync (Trainer(sync_batchnorm=True)) ---------------------------
def layer_sync(trainer: Any) -> Any | None:
    """The strategy's layer-sync plugin (``TorchSyncBatchNorm`` under
    ``Trainer(sync_batchnorm=True)``), or ``None``. Lightning keeps it in the parallel
    strategies' private ``_layer_sync`` and converts the model's BatchNorm layers in
    ``strategy.setup``."""
    return getattr(trainer.strategy, "_layer_sync", None)


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


def batch_index(trainer: Any) -> int:
    """Index of the training batch being processed in its epoch."""
    return int(trainer.fit_loop.epoch_loop.batch_idx)


# -- wandb ------------------------------------------------------------------------------
def wandb_settings_and_key(mode: str | None, online_modes: tuple[str, ...], env: Any) -> Any:
    """wandb's resolved ``(mode, base_url, api_key)``, read without network.

    Returns:
        ``None`` when the run is not online (nothing to check), else ``(url, key)``.

    Raises:
        ImportError, AttributeError: Another wandb version (the caller lets ``wandb.init``
            decide); wandb's own errors for a malformed key.
    """
    from wandb.sdk import wandb_setup
    from wandb.sdk.lib import wbauth

    settings = wandb_setup.singleton().settings
    if (mode or env.get("WANDB_MODE") or settings.mode) not in online_modes:
        return None
    url = env.get("WANDB_BASE_URL") or settings.base_url
    key = wbauth.authenticate_session(
        host=url, source="WandbLogger", prompt=False, update_session=False
    )
    return url, key


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
    up to its last whole record ([`record_payloads`][]; ``DataError``: not a run file)."""
    from wandb.proto import wandb_internal_pb2 as pb

    rows = []
    for payload in record_payloads(path):
        record = pb.Record()
        record.ParseFromString(payload)
        if record.WhichOneof("record_type") == "history":
            items = [(i.key or "/".join(i.nested_key), _history_number(i), len(i.nested_key))
                     for i in record.history.item]  # fmt: skip
            rows.append({k: v for k, v, depth in items if v is not None and not k.startswith("_")
                         and depth <= 1})  # fmt: skip
    return rows


# -- third-party message formats (see the module docstring) -------------------------------
#: Lines of jsonargparse's Union report that say nothing about the culprit.
UNION_REPORT_NOISE: tuple[str, ...] = (
    "Does not validate against any of the Union subtypes",
    "Subtypes:",
    "Errors:",
    "- Expected a <class 'NoneType'>",
    "Given value type:",
    "Given value:",
)
#: Name -> pattern of every third-party message format the CLI's one-line errors read.
MESSAGE_FORMATS: dict[str, re.Pattern[str]] = {
    # argparse / jsonargparse: an unknown top-level key (command line, config file).
    "unrecognized": re.compile(r"unrecognized arguments: --?([\w.]+)"),
    "not_accepted": re.compile(r"Subcommand '\w+' does not accept option '([^']+)'"),
    # jsonargparse: an unknown key under init_args.
    "unknown_option": re.compile(r"Option '([^']+)' is not accepted|Key '([^']+)' is not expected"),
    # jsonargparse's nested report: one line per level.
    "parser_key": re.compile(r'^-?\s*Parser key "([^"]+)":$'),
    "callable_key": re.compile(r'expects a function or a callable class: Parser key "([^"]+)":$'),
    "class_path_problem": re.compile(r"^-?\s*Problem with given class_path '([^']+)':$"),
    "expected": re.compile(r"Expected a (.+?)\. Got value: (.*?)(?:\. Got value: .*)?$"),
    "expected_literal": re.compile(r"^-?\s*Expected a typing\.Literal\[(.*)\]$"),
    # a short class name that matches no loaded class is read as a path
    "not_a_path": re.compile(r"Expected a path but (\S+) either not accessible or invalid"),
    "none_expected": re.compile(r"^-?\s*Expected a <class 'NoneType'>$"),
    "literal": re.compile(r"typing\.Literal\[(.*)\]$"),
    "class_repr": re.compile(r"<class '(?:[\w]+\.)*(\w+)'>"),
    "union": re.compile(r"Does not validate against any of the Union subtypes"),
    "union_subtype": re.compile(r"Subtypes: \[<class '[\w.]*?(\w+)'>"),
    "given_value": re.compile(r"^\s*Given value: (.*)$"),
    "given_class_path": re.compile(r"Given value: Namespace\(class_path='([^']+)'"),
    # Python's import errors, reported inside jsonargparse's report.
    "no_attribute": re.compile(r"module '([\w.]+)' has no attribute '(\w+)'"),
    "no_module": re.compile(r"No module named '([\w.]+)'"),
    # PyTorch: an exception re-raised from a DataLoader worker.
    "worker_traceback": re.compile(r"Original Traceback"),
    "exception_prefix": re.compile(r"^[\w.]+(Error|Exception): "),
    # PyTorch (and LARS): an optimiser refusing its learning rate; a convolution refusing
    # its input channels (read by runtime/preflight.py).
    "invalid_lr": re.compile(r"(?:learning rate:?|\blr must be [^,]*, got)\s*(\S+)", re.IGNORECASE),
    "conv_channels": re.compile(r"to have (\d+) channels, but got (\d+) channels"),
}
