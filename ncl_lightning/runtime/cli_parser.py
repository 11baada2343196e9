"""The parser of ``ncl-cli``: LightningCLI's, with every error one line and the config
files and the ``trainer`` section checked before anything is built."""

from __future__ import annotations

import os
import sys
from typing import Any, NoReturn

from lightning.pytorch.cli import LightningArgumentParser

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.internals import parser_actions
from ncl_lightning.runtime.cli_errors import summarize
from ncl_lightning.runtime.config_files import check_config_args
from ncl_lightning.runtime.trainer_checks import check_seed, check_trainer

TRACEBACK_ENV = "NCL_TRACEBACK"


def _option_keys(parser: Any) -> list[str]:
    """Every dotted option key of ``parser`` and its subcommand parsers."""
    keys = []
    for action in parser_actions(parser):
        if isinstance(getattr(action, "choices", None), dict):
            for sub in action.choices.values():
                keys += _option_keys(sub)
        elif action.dest not in ("help", "config"):
            keys.append(action.dest)
    return keys


class NCLArgumentParser(LightningArgumentParser):
    """LightningCLI's parser whose errors are one [`ConfigError`][] line."""

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        if not self.exit_on_error or os.environ.get(TRACEBACK_ENV):
            super().error(message, ex)
        raise ConfigError(summarize(message, _option_keys(self))) from None

    def parse_args(self, args: Any = None, *rest: Any, **kwargs: Any) -> Any:
        """Check the ``--config`` files before jsonargparse reads them (one line naming the
        file, ``file:line:column`` for YAML errors) and the parsed ``trainer`` section
        before Lightning builds anything from it ([`check_trainer`][])."""
        check_config_args(sys.argv[1:] if args is None else [str(a) for a in args])
        cfg = super().parse_args(args, *rest, **kwargs)
        sub = cfg.get("subcommand")
        section = cfg.get(sub) if sub else cfg
        if section is not None:
            check_seed(section.get("seed_everything"))
            check_trainer(section.get("trainer"))
        return cfg


__all__ = ["TRACEBACK_ENV", "NCLArgumentParser"]
