"""``ncl-cli`` ergonomics: short class names, a short help per method, and a top-level help
that describes the project without importing torch or Lightning."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from ncl_lightning.entry import HELP, main
from ncl_lightning.foundation.internals import plain_help
from ncl_lightning.methods import NCL
from ncl_lightning.nn import SmallCNN
from ncl_lightning.runtime.cli import NCLCLI, cli_main
from tests.conftest import ROOT

TINY = [
    "--model.proj_hidden_dim", "32", "--model.proj_output_dim", "16",
    "--data.batch_size", "32", "--data.num_workers", "0",
    "--trainer.fast_dev_run", "1", "--trainer.accelerator", "cpu",
    "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
]  # fmt: skip


class TinyEncoder(nn.Module):
    """A researcher's own encoder: a plain ``nn.Module`` with ``out_dim``, no project base."""

    def __init__(self, out_dim: int = 8) -> None:
        super().__init__()
        self.out_dim = out_dim
        self.fc = nn.Linear(64, out_dim)

    def forward(self, x):  # unannotated, as a researcher may write it
        """``[B, 1, 8, 8] -> [B, out_dim]``."""
        return self.fc(x.flatten(1))


def test_short_names_fit_digits_ncl(tmp_path: Path) -> None:
    cli = cli_main([
        "fit", "--model", "NCL", "--data", "DigitsDataModule",
        "--model.backbone", "SmallCNN", "--model.backbone.out_dim", "16",
        "--model.optimizer", "LARS", "--model.optimizer.lr", "0.1",
        "--trainer.callbacks+", "FeatureStatistics", "--trainer.callbacks.sepin", "false",
        "--trainer.default_root_dir", str(tmp_path), *TINY,
    ])  # fmt: skip
    assert type(cli.model) is NCL
    assert type(cli.model.backbone) is SmallCNN and cli.model.backbone.out_dim == 16
    assert type(cli.datamodule).__name__ == "DigitsDataModule"
    assert type(cli.model.optimizers().optimizer).__name__ == "LARS"
    assert any(type(c).__name__ == "FeatureStatistics" for c in cli.trainer.callbacks)
    assert cli.trainer.global_step == 1


def test_own_module_works_as_backbone_by_class_path(tmp_path: Path) -> None:
    cli = cli_main([
        "fit", "--model", "NCL", "--data", "DigitsDataModule",
        "--model.backbone", f"{__name__}.TinyEncoder", "--model.backbone.out_dim", "12",
        "--trainer.default_root_dir", str(tmp_path), *TINY,
    ])  # fmt: skip
    backbone = cli.model.backbone
    assert type(backbone) is TinyEncoder and backbone.out_dim == 12
    x = torch.zeros(2, 1, 8, 8)
    assert cli.model.encode(x).h.shape == (2, 12)


def test_method_help_is_short_and_names_the_backbones(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as stop:
        cli_main(["fit", "--model.help", "NCL"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    # Typed nn.Module, the help listed every class of torch: 2,444 lines. NCL's own
    # arguments take ~155 lines at 80 columns, more on a narrower terminal.
    assert 20 < len(lines) < 250, len(lines)
    for name in ("SmallCNN", "ResNet", "SpriteEncoder", "SparseCodingEncoder"):
        assert name in out
    assert "torch.nn.Conv2d" not in out
    assert "--model.nonneg" in out and "--model.backbone" in out


# what a class's help shows with mkdocs' syntax left in: a cross-reference, a reST literal
MARKUP = ("][", "``")


@pytest.mark.parametrize("option", [
    ("--model.help", "NCL"), ("--model.help", "BayesNCL"), ("--model.help", "LinearProbe"),
    ("--data.help", "DigitsDataModule"), ("--data.help", "ImageNet100DataModule"),
    ("--trainer.callbacks.help", "TopActivations"),
    ("--trainer.logger.help", "ncl_lightning.runtime.loggers.WandbLogger"),
])  # fmt: skip
def test_class_help_reads_as_plain_text(
    option: tuple[str, str], capsys: pytest.CaptureFixture
) -> None:
    """The docstrings' mkdocs links (``[`x`][ncl_lightning...]``) and reST literals show as
    their text in ``ncl-cli fit <option> --help``; the text itself is kept."""
    with pytest.raises(SystemExit) as stop:
        cli_main(["fit", *option])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert not [line for line in out.splitlines() if any(m in line for m in MARKUP)], out
    if option[1] == "NCL":  # "... [`OBJECTIVES`][ncl_lightning.losses.OBJECTIVES]) or ..."
        assert "`OBJECTIVES`" in out and "z+ = σ+(g(f(x)))" in out


def test_plain_help_against_examples() -> None:
    cases = {
        "see [`setup`][] and [`A.b`][ncl_lightning.A.b]": "see `setup` and `A.b`",
        "[the page](https://x.org/a_b) ``None``": "the page (https://x.org/a_b) `None`",
        "a [list] [and] [x](y z)": "a [list] [and] [x](y z)",  # not links: left
    }
    for text, plain in cases.items():
        assert plain_help(text) == plain


def test_subcommand_help_names_the_project(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        cli_main(["fit", "--help"])
    out = capsys.readouterr().out
    assert "ncl-lightning" in out and "Lightning Trainer command line tool" not in out


class _Recorder:
    """Stands in for the parser: records the options ``add_arguments_to_parser`` adds."""

    def __init__(self) -> None:
        self.options: list[str] = []

    def link_arguments(self, *args: Any, **kwargs: Any) -> None:
        pass

    def add_argument(self, name: str, **kwargs: Any) -> None:
        self.options.append(name)


def test_top_level_help_names_every_subcommand_and_option() -> None:
    for sub in NCLCLI.subcommands():
        assert f"\n  {sub} " in HELP, sub
    recorder = _Recorder()
    NCLCLI.add_arguments_to_parser(None, recorder)  # type: ignore[arg-type]
    assert recorder.options
    for option in [*recorder.options, "--config", "--print_config", "--ckpt_path"]:
        assert option in HELP, option
    for name in ("ncl-lightning", "NCL", "--model NCL", "docs/quickstart.md", "examples:"):
        assert name in HELP
    assert "Lightning Trainer command line tool" not in HELP


def test_top_level_help_examples_name_existing_configs() -> None:
    for word in HELP.split():
        if word.startswith("configs/"):
            assert (ROOT / word).is_file(), word


@pytest.mark.parametrize("argv", [["--help"], ["-h"], []])
def test_top_level_help_imports_neither_torch_nor_lightning(argv: list[str]) -> None:
    code = (
        "import sys\n"
        "from ncl_lightning.entry import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit as stop:\n"
        "    print('exit', stop.code)\n"
        "heavy = sorted(m for m in ('torch', 'lightning', 'numpy') if m in sys.modules)\n"
        "print('heavy', heavy)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    assert out.startswith(HELP)
    assert "heavy []" in out
    assert ("exit 2" in out) == (argv == [])


def test_console_script_points_at_the_light_entry() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    assert 'ncl-cli = "ncl_lightning.entry:main"' in text


def test_version_and_subcommands_go_through(capsys: pytest.CaptureFixture) -> None:
    main(["--version"])
    assert capsys.readouterr().out.startswith("ncl-cli (ncl-lightning) ")
    with pytest.raises(SystemExit) as stop:
        main(["fit", "--model", "NoSuchMethod"])
    assert stop.value.code == 2
    assert "NoSuchMethod" in capsys.readouterr().err


def test_startup_benchmark_times_the_top_level_help(monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks import startup

    monkeypatch.setattr(startup, "COMMANDS", (("--help",),))
    (row,) = startup.run(1)
    assert row.what == "ncl-cli --help" and row.goal == startup.HELP_GOAL_S
    assert row.seconds > 0 and row.note == f"{len(HELP.splitlines())} lines, median of 5"
