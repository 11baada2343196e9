"""Argument checks of the studies, run before any cell starts (nothing is written).

Each raises one [`ConfigError`][ncl_lightning.foundation.errors.ConfigError] naming the option
(``--seeds``, ``--run-arg``...); ``python -m ncl_lightning.studies.<name>`` prints it as
``<tool>: error: <option>: <problem>`` with exit status 2.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.resources import config_file
from ncl_lightning.foundation.validation import check_int, check_output_dir, check_range
from ncl_lightning.studies.study_defs import Study
from ncl_lightning.studies.study_file import check_config_file

SEED_MAX = 2**32 - 1  # numpy's seeds, which seed_everything sets

RUN_ARG = "--run-arg"
CONFIG_FLAGS = ("--config", "-c")


def check_seeds(key: str, seeds: Sequence[int]) -> None:
    """At least one seed; each an integer in ``[0, 2**32 - 1]`` (what ``seed_everything``
    takes), none twice (a cell's folder is named by its seed)."""
    if not seeds:
        raise ConfigError(f"{key}: give at least one seed", key=key)
    for seed in seeds:
        check_int(key, seed, 0)
        check_range(key, seed, 0, SEED_MAX)
    repeated = sorted({s for s in seeds if list(seeds).count(s) > 1})
    if repeated:
        raise ConfigError(f"{key}: seed(s) {repeated} given twice", key=key)


def check_run_args(
    run_args: Sequence[str], owned: Mapping[str, str], option: str = RUN_ARG
) -> None:
    """The extra ``ncl-cli`` arguments of every cell: options (``--key=value`` or
    ``--key value``), none of the keys the study sets for each cell (``owned``: key ->
    why), and every ``--config`` file they name readable.

    Args:
        run_args: The ``--run-arg`` values (or a row's ``args``), in order.
        owned: Config keys (``trainer.default_root_dir``) the study sets itself; a key
            below one (``trainer.logger.init_args.name``) is refused too.
        option: Where the arguments come from, first in every message.
    """
    if run_args and not run_args[0].startswith("-"):
        example = f"{RUN_ARG}=" if option == RUN_ARG else ""
        raise ConfigError(
            f"{option}: {run_args[0]!r} is not an option; give ncl-cli options such as "
            f"{example}--trainer.max_epochs=2",
            key=option,
        )
    for i, arg in enumerate(run_args):
        if not arg.startswith("-") or _is_number(arg):
            continue  # the value of the option before it
        flag, sep, value = arg.partition("=")
        _check_not_owned(flag.lstrip("-"), arg, owned, option)
        if flag in CONFIG_FLAGS:
            if not sep:  # the file is the next argument
                value = run_args[i + 1] if i + 1 < len(run_args) else None
            if value is None:
                raise ConfigError(f"{option}: {arg} needs a config file", key=option)
            try:
                mapping = check_config_file(value)
            except ConfigError as err:
                raise ConfigError(f"{option}: {err}", key=option) from None
            for name in _dotted_keys(mapping):  # a config file sets what it names, too
                _check_not_owned(name, f"{arg} (its {name})", owned, option)


def _check_not_owned(name: str, given: str, owned: Mapping[str, str], option: str) -> None:
    """Refuse a config key ``name`` (``given`` as the user gave it) at or below an owned key."""
    for key, why in owned.items():
        if name == key or name.startswith(f"{key}."):
            raise ConfigError(
                f"{option}: {given} would change {key}, which the study sets for each cell ({why})",
                key=option,
            )


def _dotted_keys(mapping: Mapping, prefix: str = "") -> list[str]:
    """Every key of a nested mapping, dotted (``trainer.logger.init_args.name``)."""
    keys = []
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        keys.append(name)
        if isinstance(value, Mapping):
            keys += _dotted_keys(value, f"{name}.")
    return keys


def _is_number(arg: str) -> bool:
    try:
        float(arg)
    except ValueError:
        return False
    return True


def check_seeds_study(
    study: Study,
    out: Path,
    seeds: Sequence[int],
    workers: int,
    threads: int,
    extra: Sequence[str],
    rows: Sequence[str] | None,
) -> None:
    """Every argument of [`run_study`][ncl_lightning.studies.seeds.run_study], before any cell
    starts; nothing is written.

    Raises:
        ConfigError: The first bad argument, naming its option.
    """
    names = [row.name for row in study.rows]
    unknown = [r for r in rows or () if r not in names]
    if unknown:
        raise ConfigError(
            f"--rows: unknown row(s) {unknown} of {study.title!r}; rows: {names}", key="rows"
        )
    check_seeds("--seeds", seeds)
    check_int("--workers", workers)
    check_int("--threads", threads)
    # The config keys the study sets for each cell (key -> why): ``--run-arg`` and a row's
    # ``args`` may not set them.
    owned = {
        "seed_everything": "the cell's seed, from --seeds",
        **{key.lstrip("-"): "the cell's seed, from --seeds" for key in study.seed_keys},
        "trainer.default_root_dir": "<out>/runs/<row>/seed_<seed>; choose --out instead",
        "trainer.logger": "the CSV log the study reads its metrics from",
    }
    if any(row.pretrain for row in study.rows):
        owned["model.init_args.pretrained"] = "the last.ckpt of the row's pretrain run"
    check_run_args(extra, owned)
    source = f"{study.source}: " if study.source else ""
    for i, row in enumerate(study.rows):
        if rows is None or row.name in rows:
            check_run_args(row.args, owned, option=f"{source}rows[{i}] ({row.name}): args")
            for config in (row.config, *row.overlays, *filter(None, [row.pretrain])):
                config_file(config)  # a packaged config of the row, or a file
    check_output_dir("--out", out)


def check_landscape_study(
    out: Path,
    variants: Sequence[str],
    known: Sequence[str],
    sparsities: Sequence[float],
    seeds: int,
    workers: int,
    extra: Sequence[str],
) -> None:
    """Every argument of [`run_study`][ncl_lightning.studies.landscape.run_study] (``known``: the
    variant names), before any run starts; nothing is written.

    Raises:
        ConfigError: The first bad argument, naming its option.
    """
    unknown = [v for v in variants if v not in known]
    if unknown:
        raise ConfigError(
            f"--variants: unknown variant(s) {unknown}; choose from {list(known)}",
            key="variants",
        )
    if not variants:
        raise ConfigError("--variants: give at least one variant", key="variants")
    if not sparsities:
        raise ConfigError("--sparsity: give at least one value", key="sparsity")
    for sparsity in sparsities:
        check_range("--sparsity", sparsity, 0, 1, "(]")  # NaN fails too
    check_int("--seeds", seeds)
    check_int("--workers", workers)
    check_run_args(
        extra,
        {
            "seed_everything": "the run's seed, from --seeds",
            "data.init_args.seed": "the run's seed, from --seeds",
            "data.init_args.nonzero_prob": "the sparsity, from --sparsity",
            "trainer.default_root_dir": "<out>/runs/...; choose --out instead",
            "trainer.logger": "the CSV log the study reads its curves from",
        },
    )
    check_output_dir("--out", out)
