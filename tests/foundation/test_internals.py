"""The private APIs and third-party message formats the package relies on are all still
where ``foundation/internals.py`` expects them: an upgrade that moves one fails here, naming
it (and, for a message format, showing the message observed)."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any, Literal, NoReturn

import lightning as L
import pytest
import torch
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, OptimizerCallable
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

from ncl_lightning.foundation import internals
from ncl_lightning.foundation.validation import check_positive
from ncl_lightning.runtime import cli_errors


def test_every_private_api_is_present() -> None:
    missing = internals.missing_private_apis()
    assert not missing, (
        f"private APIs moved by an upgrade: {missing}; update ncl_lightning/foundation/internals.py"
    )


# -- the one door: no other module names a private third-party name ---------------------
PACKAGE = Path(internals.__file__).resolve().parents[1]
THIRD_PARTY = (
    "lightning",
    "pytorch_lightning",
    "lightning_fabric",
    "jsonargparse",
    "wandb",
    "torch",
)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_uses(path: Path, listed: set[str], root: Path = PACKAGE.parent) -> list[str]:
    """``file:line ...`` for each import of a private third-party name (or from a private
    module) and each use of a name :data:`~internals.PRIVATE_APIS` lists: an attribute, a
    method defined under that name, a string (``getattr(x, "_name")``)."""
    where = f"{path.relative_to(root)}:"
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            parts = node.module.split(".")
            names = [a.name for a in node.names]
            if parts[0] in THIRD_PARTY and any(map(_private, parts + names)):
                found.append((node.lineno, f"from {node.module} import {', '.join(names)}"))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] in THIRD_PARTY and any(map(_private, parts)):
                    found.append((node.lineno, f"import {alias.name}"))
        elif isinstance(node, ast.Attribute) and node.attr in listed:
            found.append((node.lineno, f".{node.attr}"))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in listed:
            found.append((node.lineno, f"def {node.name}"))
        elif isinstance(node, ast.Constant) and node.value in listed:
            found.append((node.lineno, f"{node.value!r}"))
    return [f"{where}{line} {what}" for line, what in sorted(found)]


def test_private_names_are_used_only_in_internals() -> None:
    """Only ``foundation/internals.py`` imports a private name of Lightning, jsonargparse,
    wandb or torch, or names one of :data:`~internals.PRIVATE_APIS`; everything else goes
    through its functions, so the upgrade check above covers every private name used."""
    listed = {dotted.rsplit(".", 1)[-1] for _, dotted in internals.PRIVATE_APIS}
    door = Path(internals.__file__).resolve()
    leaks = [
        line
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.resolve() != door
        for line in private_uses(path, listed)
    ]
    assert not leaks, "private names outside foundation/internals.py:\n" + "\n".join(leaks)


def test_the_scan_finds_each_kind_of_leak(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from lightning.fabric.utilities.types import _PATH\n"
        "from jsonargparse._typehints import ActionTypeHint\n"
        "import wandb.sdk._private\n"
        "x = trainer._logger_connector\n"
        "y = getattr(parser, '_actions', [])\n"
        "class C:\n"
        "    def _parse_ckpt_path(self): ...\n"
        "from lightning.pytorch import Trainer\n"
        "from ncl_lightning.foundation import _mine\n"
        "z = self._own\n"
    )
    listed = {"_logger_connector", "_actions", "_parse_ckpt_path"}
    found = private_uses(probe, listed, root=tmp_path)
    assert [line.split()[0] for line in found] == [f"probe.py:{n}" for n in (1, 2, 3, 4, 5, 7)]


class _Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.built_by_cli = internals.built_by_cli()
        self.layer = nn.Linear(2, 1)
        self.seen: list[tuple[int, int, int, int]] = []

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        t = self.trainer
        self.seen.append(
            (
                internals.epochs_processed(t),
                internals.batches_processed(t),
                internals.batches_fetched_total(t),
                internals.batch_index(t),
            )
        )
        return self.layer(batch[0]).sum()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_fit_loop_counters_read_off_a_real_run(tmp_path) -> None:
    data = DataLoader(TensorDataset(torch.zeros(6, 2)), batch_size=2)
    module = _Tiny()
    trainer = L.Trainer(
        max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=tmp_path,
    )  # fmt: skip
    trainer.fit(module, data)
    assert not module.built_by_cli
    # (epoch started, batches done in the epoch, batches fetched in the run, batch index)
    assert module.seen == [(e, b, 3 * e + b + 1, b) for e in range(2) for b in range(3)]


def test_outside_cli_restores_the_hand_over() -> None:
    from lightning.pytorch.core.mixins import hparams_mixin

    token = hparams_mixin._given_hyperparameters.set({"a": 1})
    try:
        assert internals.built_by_cli()
        with internals.outside_cli():
            assert not internals.built_by_cli()
        assert internals.built_by_cli()
    finally:
        hparams_mixin._given_hyperparameters.reset(token)


# -- third-party message formats ---------------------------------------------------------
# Each case makes a real LightningCLI parser (or a real DataLoader) fail on one bad value
# and lists the MESSAGE_FORMATS patterns its message must still match.


class TinyNet(nn.Module):
    """A backbone for the nested class_path cases."""

    def __init__(self, width: int = 2) -> None:
        super().__init__()
        self.width = width


class TinyOptimizer(torch.optim.SGD):
    """An optimiser whose ``lr`` is a plain ``float`` (``SGD``'s also takes a tensor)."""

    def __init__(self, params: Any, lr: float = 0.1) -> None:
        super().__init__(params, lr=lr)


class TinyModule(L.LightningModule):
    """A method with a float, a ``Literal``, a nested module and a callable argument."""

    def __init__(
        self,
        temperature: float = 0.1,
        mode: Literal["a", "b"] = "a",
        backbone: nn.Module | None = None,
        optimizer: OptimizerCallable | None = None,
    ) -> None:
        super().__init__()
        check_positive("temperature", temperature)


class NeedsSize(L.LightningModule):
    """A method with a required argument."""

    def __init__(self, size: int) -> None:
        super().__init__()


class TinyData(L.LightningDataModule):
    """A DataModule with one argument."""

    def __init__(self, batch_size: int = 2) -> None:
        super().__init__()


HERE = __name__
BASE = ["fit", "--data", f"{HERE}.TinyData", "--trainer.logger", "false"]
MODEL = ["--model", f"{HERE}.TinyModule"]


class _Refused(Exception):
    """The parser's error message, raised instead of printing usage and exiting."""


class _Parser(LightningArgumentParser):
    """Reports as ``ncl-cli``'s parser does: a subcommand's parser raises to its parent
    (which words the report), the top-level one raises :class:`_Refused`."""

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        if not self.exit_on_error:
            super().error(message, ex)
        raise _Refused(message)


def _cli_error(args: list[str]) -> Exception:
    """The error LightningCLI stops on for ``args``."""
    try:
        LightningCLI(L.LightningModule, L.LightningDataModule, subclass_mode_model=True,
                     subclass_mode_data=True, parser_class=_Parser, args=args,
                     save_config_callback=None)  # fmt: skip
    except Exception as err:  # the parser's report or the class's own error, wrapped
        return err
    raise AssertionError(f"LightningCLI accepted {args}")


def _one_line(err: Exception) -> str | None:
    """What ``ncl-cli`` makes of ``err``: its parser summarises a report, a build error
    goes through :func:`~ncl_lightning.runtime.cli_errors.user_error_message`."""
    if isinstance(err, _Refused):
        return cli_errors.summarize(str(err))
    return cli_errors.user_error_message(err)


def _worker_message() -> str:
    """The message PyTorch re-raises for an error inside a DataLoader worker."""

    class Broken(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 1

        def __getitem__(self, index: int) -> Tensor:
            raise ValueError("item 0 is broken")

    try:
        next(iter(DataLoader(Broken(), num_workers=1)))
    except ValueError as err:
        return str(err)
    raise AssertionError("the DataLoader worker raised nothing")


def _yaml(tmp: Path, text: str) -> list[str]:
    path = tmp / "config.yaml"
    path.write_text(text)
    return ["--config", str(path)]


# (case, arguments (a function of tmp_path), MESSAGE_FORMATS names it must match,
#  the one line cli_errors makes of it)
CASES = [
    ("unknown top-level key", lambda t: [*MODEL, "--trainer.max_epohcs", "3"],
     ["unrecognized"], "trainer.max_epohcs: no such key"),
    ("unknown key in a config file", lambda t: [*MODEL, *_yaml(t, "trainer: {max_epohcs: 3}")],
     ["not_accepted"], "trainer.max_epohcs: no such key"),
    ("unknown init key", lambda t: [*MODEL, "--model.init_args.tempreture", "3"],
     ["parser_key", "union", "union_subtype", "unknown_option"],
     "model.init_args.tempreture: no such key for TinyModule; did you mean "
     "model.init_args.temperature?"),
    ("bad type", lambda t: [*MODEL, "--model.init_args.temperature", "abc"],
     ["parser_key", "expected", "class_repr", "none_expected"],
     "model.init_args.temperature: expected float, got 'abc'"),
    ("bad Literal choice", lambda t: [*MODEL, "--model.init_args.mode", "c"],
     ["parser_key", "expected"], "model.init_args.mode: 'c' is not valid; valid choices: 'a', 'b'"),
    ("bad choice in a Union of Literals", lambda t: [*MODEL, "--trainer.precision", "7"],
     ["parser_key", "expected_literal", "literal", "none_expected", "given_value"],
     "trainer.precision: '7' is not valid; valid choices: 64, 32, 16, 'transformer-engine'"),
    ("unknown class", lambda t: ["--model.class_path", f"{HERE}.TinyModul"],
     ["class_path_problem", "no_attribute"], "model.class_path: unknown method"),
    ("unknown short class name", lambda t: ["--model", "TinyModul"],
     ["not_a_path"], "model: unknown method 'TinyModul'; did you mean 'TinyModule'?"),
    ("unknown module", lambda t: ["--model.class_path", "no_such_module_xyz.Tiny"],
     ["class_path_problem", "no_module"], "no module 'no_such_module_xyz'"),
    ("bad value of a callable's argument",
     lambda t: [*_yaml(t, f"model: {{class_path: {HERE}.TinyModule, init_args: {{optimizer: "
                          f"{{class_path: {HERE}.TinyOptimizer, init_args: {{lr: 0.4}}}}}}}}"),
                "--model.init_args.optimizer.init_args.lr", "abc"],
     ["class_path_problem", "callable_key", "expected"],
     "model.init_args.optimizer.init_args.lr: expected float, got 'abc'"),
    ("missing required argument", lambda t: ["--model", f"{HERE}.NeedsSize"],
     ["parser_key", "union"], "model.init_args: the following arguments are required: size"),
    ("a class refuses its value", lambda t: [*MODEL, "--model.init_args.temperature", "-1"],
     ["union", "union_subtype", "given_class_path"],
     "model.init_args.temperature must be > 0, got -1.0"),
]  # fmt: skip


def _matches(pattern: re.Pattern[str], message: str) -> bool:
    """Whether ``pattern`` matches the message or one of its (stripped) lines."""
    lines = [line.strip() for line in message.splitlines()]
    return bool(pattern.search(message) or any(pattern.search(line) for line in lines))


def _check_formats(case: str, names: list[str], message: str) -> None:
    for name in names:
        pattern = internals.MESSAGE_FORMATS[name]
        assert _matches(pattern, message), (
            f"message format {name!r} ({pattern.pattern!r}) no longer matches the {case!r} "
            f"error; observed message:\n{message}\nupdate MESSAGE_FORMATS in "
            "ncl_lightning/foundation/internals.py"
        )


@pytest.mark.parametrize(("args", "names", "line"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_message_formats_match_real_errors(args, names: list[str], line: str, tmp_path) -> None:
    case = next(c[0] for c in CASES if c[2] is names)
    err = _cli_error([*BASE, *args(tmp_path)])
    _check_formats(case, names, str(err))
    one = _one_line(err)
    assert one is not None and line in one and "\n" not in one, (case, one, str(err))


def test_worker_traceback_format() -> None:
    message = _worker_message()
    _check_formats("DataLoader worker", ["worker_traceback", "exception_prefix"], message)
    assert cli_errors.one_line(ValueError(message)) == "item 0 is broken"


def test_every_format_and_noise_line_is_exercised(tmp_path) -> None:
    """A pattern no case produces would be untested: each name is in some case, and each
    noise prefix begins a line of some real report."""
    used = {n for _, _, names, _ in CASES for n in names} | {"worker_traceback", "exception_prefix"}
    used |= {"invalid_lr", "conv_channels"}  # test_torch_formats
    assert used == set(internals.MESSAGE_FORMATS)
    message = str(_cli_error([*BASE, *MODEL, "--model.init_args.temperature", "abc"]))
    lines = [line.strip() for line in message.splitlines()]
    for noise in internals.UNION_REPORT_NOISE:
        assert any(line.startswith(noise) for line in lines), (noise, message)


def test_a_format_that_no_longer_matches_names_pattern_and_message() -> None:
    with pytest.raises(AssertionError, match=r"(?s)'parser_key' \(.*Parser key.*\).*observed "
                       r"message:.*something else entirely"):  # fmt: skip
        _check_formats("a case", ["parser_key"], "something else entirely")


def test_torch_formats() -> None:
    """The preflight reads the learning rate off torch's and LARS's refusals, and the
    channel counts off a convolution's."""
    from ncl_lightning.optim import LARS

    param = [torch.zeros(1, requires_grad=True)]
    for make in (lambda: torch.optim.SGD(param, lr=-0.1), lambda: LARS(param, lr=-0.1)):
        with pytest.raises(ValueError) as info:
            make()
        _check_formats("optimiser lr", ["invalid_lr"], str(info.value))
        assert internals.MESSAGE_FORMATS["invalid_lr"].search(str(info.value)).group(1) == "-0.1"
    with pytest.raises(RuntimeError) as info:
        nn.Conv2d(3, 4, 3)(torch.zeros(1, 1, 8, 8))
    _check_formats("conv channels", ["conv_channels"], str(info.value))
    assert internals.MESSAGE_FORMATS["conv_channels"].search(str(info.value)).groups() == (
        "3",
        "1",
    )
