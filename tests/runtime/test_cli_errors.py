"""Every bad input of issue 8 through ``ncl-cli``: one line naming the culprit (ours), or
jsonargparse's own report naming the key, before anything is trained or written.

Each case runs the real entry point (``ncl_lightning.runtime.cli.main``) on a real config with
one thing wrong and checks: exit status 2, exactly one ``ncl-cli: error:`` line and no
traceback on stderr, the offending key/value/path (and the valid choice, where there is
one) in that line, and an output folder that was never created.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import lightning as L
import pytest
import torch
from PIL import Image

from ncl_lightning.data import DigitsDataModule
from ncl_lightning.methods import BayesNCL
from ncl_lightning.nn import SmallCNN
from ncl_lightning.runtime.cli import main
from tests.helpers.cli import refused_fit

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "configs" / "demo"
WNIDS = (ROOT / "ncl_lightning/data/resources/imagenet100_classes.txt").read_text().split()


class _Exploit:
    """Unpickling this runs ``os.system`` and creates a file."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self):
        return (os.system, (f"touch {self.target}",))


@pytest.fixture(scope="module")
def bayesncl_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real BayesNCL checkpoint (one training step on the digits)."""
    torch.manual_seed(1)
    path = tmp_path_factory.mktemp("bayes") / "bayesncl.ckpt"
    model = BayesNCL(SmallCNN(1, 32, 128), proj_hidden_dim=256, proj_output_dim=64,
                     num_classes=10, batch_size=128)  # fmt: skip
    trainer = L.Trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=0,
                        accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    trainer.fit(model, DigitsDataModule(batch_size=128, num_workers=0))
    trainer.save_checkpoint(path)
    return path


def _folder(tmp: Path, cifar: Path, classes: int = 3, per_class: int = 4) -> Path:
    """A small real-image copy of the CIFAR-10 subset: train/ and val/ with 3 classes."""
    root = tmp / "images"
    for split in ("train", "val"):
        for name in sorted(p.name for p in (cifar / "train").iterdir())[:classes]:
            (root / split / name).mkdir(parents=True)
            for src in sorted((cifar / "train" / name).glob("*.png"))[:per_class]:
                shutil.copy(src, root / split / name / src.name)
    return root


def _imagenet(tmp: Path, drop: int = 0, empty: int = 0) -> Path:
    """An ImageNet-100 tree of tiny PNGs; ``drop`` class folders removed, ``empty`` emptied."""
    root = tmp / "imagenet"
    for split in ("train", "val"):
        for i, wnid in enumerate(WNIDS):
            if split == "train" and i < drop:
                continue
            folder = root / split / wnid
            folder.mkdir(parents=True)
            if not (split == "train" and drop <= i < drop + empty):
                Image.new("RGB", (8, 8)).save(folder / "a.png")
    return root


def _folder_args(root: Path, batch: int = 4) -> list[str]:
    return ["--data", "ncl_lightning.data.ImageFolderDataModule", "--data.init_args.root",
            str(root), "--data.init_args.batch_size", str(batch),
            "--model.init_args.backbone.init_args.in_channels", "3"]  # fmt: skip


def _imagenet_args(root: Path) -> list[str]:
    return ["--data", "ncl_lightning.data.ImageNet100DataModule", "--data.init_args.root",
            str(root), "--data.init_args.batch_size", "4",
            "--model.init_args.backbone.init_args.in_channels", "3"]  # fmt: skip


# (case id, config, extra arguments (a function of tmp_path, cifar subset, checkpoint),
#  substrings the error line must contain)
CASES = [
    ("unknown nonneg map", "digits_ncl", lambda t, c, k: ["--model.init_args.nonneg", "rep_reluu"],
     ["model.init_args.nonneg", "rep_reluu", "rep_relu", "softplus"]),
    ("unknown gate type", "digits_bayesncl", lambda t, c, k: ["--model.init_args.gate", "stee"],
     ["model.init_args.gate", "stee", "ste", "gumbel"]),
    ("non-positive temperature", "digits_ncl",
     lambda t, c, k: ["--model.init_args.temperature", "0"],
     ["model.init_args.temperature must be > 0"]),
    ("non-positive batch size", "digits_ncl", lambda t, c, k: ["--data.init_args.batch_size", "0"],
     ["data.init_args.batch_size", "0"]),
    ("non-positive learning rate", "digits_ncl",
     lambda t, c, k: ["--model.init_args.optimizer.init_args.lr", "-0.1"],
     ["model.init_args.optimizer.init_args.lr", "-0.1"]),
    ("projector dim", "digits_ncl", lambda t, c, k: ["--model.init_args.proj_output_dim", "0"],
     ["model.init_args.proj_output_dim", "0"]),
    ("gating dim", "digits_bayesncl", lambda t, c, k: ["--model.init_args.gate_hidden_dim", "0"],
     ["model.init_args.gate_hidden_dim", "0"]),
    ("backbone does not fit the data", "digits_ncl",
     lambda t, c, k: ["--model.init_args.backbone.init_args.in_channels", "3"],
     ["does not fit", "3", "1"]),
    ("data folder missing", "digits_ncl", lambda t, c, k: _folder_args(t / "nowhere"),
     ["data.init_args.root", "nowhere", "not found"]),
    ("ImageNet-100 class folder missing", "digits_ncl",
     lambda t, c, k: _imagenet_args(_imagenet(t, drop=2)),
     ["class folder(s) missing", WNIDS[0], WNIDS[1], "imagenet100_classes.txt"]),
    ("empty class folder", "digits_ncl", lambda t, c, k: _imagenet_args(_imagenet(t, empty=1)),
     ["empty class folder", WNIDS[0]]),
    ("fewer samples than one batch", "digits_ncl",
     lambda t, c, k: _folder_args(_folder(t, c), batch=64),
     ["fewer than one batch", "data.init_args.batch_size=64", "12 samples"]),
    ("checkpoint of another method", "digits_ncl", lambda t, c, k: ["--ckpt_path", str(k)],
     ["ckpt_path", "BayesNCL", "does not fit", "ncl_lightning.methods.ncl.NCL",
      "unexpected keys: gating_head."]),
    ("no last checkpoint", "digits_ncl", lambda t, c, k: ["--ckpt_path", "last"],
     ["ckpt_path", "no last.ckpt", "out"]),
    ("missing checkpoint", "digits_ncl", lambda t, c, k: ["--ckpt_path", str(t / "none.ckpt")],
     ["ckpt_path", "none.ckpt", "not found"]),
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(("config", "extra", "expected"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_bad_input_is_one_line_before_anything_is_written(
    config: str, extra, expected: list[str], tmp_path: Path, cifar_subset: Path,
    bayesncl_ckpt: Path, capsys: pytest.CaptureFixture,
) -> None:  # fmt: skip
    line = refused_fit(config, extra(tmp_path, cifar_subset, bayesncl_ckpt), tmp_path, capsys)
    for part in expected:
        assert part in line, f"{part!r} not in {line!r}"


# What jsonargparse refuses while it parses: its own report (usage, then "error: ..."),
# exit status 2, naming the key; nothing is built or written.
PARSE_CASES = [
    ("unknown method", ["--model.class_path", "ncl_lightning.methods.NCLL"], "NCLL"),
    ("unknown short class name", ["--data", "DigitsDataModul"], 'Parser key "data"'),
    ("unknown short backbone name", ["--model.backbone", "SmalCNN"], "SmalCNN"),
    ("unknown backbone", ["--model.init_args.backbone.class_path", "ncl_lightning.nn.ResNett"],
     "ResNett"),
    ("invalid choice", ["--data.init_args.augment_on", "gpu"], 'Parser key "augment_on"'),
    ("wrong type", ["--model.init_args.temperature", "abc"], "abc"),
    ("seed out of range", ["--seed_everything", "-1"], 'Parser key "seed_everything"'),
    ("seed not a number", ["--seed_everything", "abc"],
     "expected true, false or an integer in [0, 2**32 - 1], got 'abc'"),
    ("precision", ["--trainer.precision", "7"], 'Parser key "trainer.precision"'),
]  # fmt: skip


def parse_refused(extra: list[str], tmp: Path, capsys: pytest.CaptureFixture) -> str:
    """``ncl-cli fit`` on the digits demo with ``extra``: exit status 2, nothing written;
    returns stderr."""
    out = tmp / "out"
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(DEMO / "digits_ncl.yaml"), "--trainer.default_root_dir",
              str(out), "--trainer.logger.init_args.save_dir", str(out), *extra])  # fmt: skip
    assert exit_info.value.code == 2
    assert not out.exists()
    return capsys.readouterr().err


@pytest.mark.parametrize(("extra", "named"), [c[1:] for c in PARSE_CASES],
                         ids=[c[0] for c in PARSE_CASES])  # fmt: skip
def test_what_jsonargparse_refuses_exits_2_naming_the_key(
    extra: list[str], named: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    err = parse_refused(extra, tmp_path, capsys)
    assert "error:" in err and named in err, err


# Keys no parser of the subcommand knows, on the command line or in a --config file: our one
# line with the closest key, before jsonargparse parses; a prefix of a real key is not taken
# for it (argparse's allow_abbrev is off)
TYPO_CASES = [
    ("unknown trainer key", lambda t: ["--trainer.max_epohcs", "3"],
     "unknown key 'trainer.max_epohcs'; did you mean 'trainer.max_epochs'?"),
    ("abbreviated trainer key", lambda t: ["--trainer.max_epoch", "3"],
     "unknown key 'trainer.max_epoch'; did you mean 'trainer.max_epochs'?"),
    ("abbreviated key with =", lambda t: ["--trainer.max_epoch=3"],
     "unknown key 'trainer.max_epoch'; did you mean 'trainer.max_epochs'?"),
    ("abbreviated top-level key", lambda t: ["--seed_every", "3"],
     "unknown key 'seed_every'; did you mean 'seed_everything'?"),
    ("misspelt help", lambda t: ["--trainer.callback.help"],
     "unknown key 'trainer.callback'; did you mean 'trainer.callbacks'?"),
    ("key in a config file", lambda t: _config(t, "trainer:\n  max_epoch: 2\n"),
     "unknown key 'trainer.max_epoch' in "),
    ("key with nothing close", lambda t: ["--zzzz", "1"],
     "unknown key 'zzzz'; see: ncl-cli fit --help"),
    # the arguments of the model's and the DataModule's class, as jsonargparse finds them
    ("model argument", lambda t: ["--model.init_args.temprature", "0.3"],
     "unknown key 'model.init_args.temprature'; did you mean 'model.init_args.temperature'?"),
    ("model argument, short form", lambda t: ["--model.temprature", "0.3"],
     "unknown key 'model.init_args.temprature'; did you mean 'model.init_args.temperature'?"),
    ("data argument", lambda t: ["--data.init_args.batch_sise", "3"],
     "unknown key 'data.init_args.batch_sise'; did you mean 'data.init_args.batch_size'?"),
    ("argument of the class named last", lambda t: ["--model", "BayesNCL",
     "--model.init_args.prior_rho", "0.3"],
     "unknown key 'model.init_args.prior_rho'; did you mean 'model.init_args.prior'?"),
    ("model argument in a config file", lambda t: _config(t, "model:\n  init_args:\n"
     "    temprature: 0.3\n"), "'model.init_args.temprature' in "),
]  # fmt: skip


def _config(tmp: Path, text: str) -> list[str]:
    path = tmp / "typo.yaml"
    path.write_text(text)
    return ["--config", str(path)]


@pytest.mark.parametrize(("extra", "line"), [c[1:] for c in TYPO_CASES],
                         ids=[c[0] for c in TYPO_CASES])  # fmt: skip
def test_unknown_keys_are_one_line_with_the_closest_key(
    extra, line: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    err = parse_refused(extra(tmp_path), tmp_path, capsys)
    (first,) = [x for x in err.splitlines() if x.startswith("ncl-cli: error:")]
    assert line in first, first


def test_known_keys_below_a_class_and_groups_pass_the_check(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Keys below a class-typed key (``model.init_args.*``, ``trainer.logger.init_args.*``),
    appended list items and whole groups go on to jsonargparse: ``--print_config`` prints
    the resolved values."""
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(DEMO / "digits_ncl.yaml"),
              "--model.init_args.temperature", "0.3", "--trainer.max_epochs=2",
              "--trainer", '{"limit_val_batches": 1}', "--trainer.callbacks+",
              "LearningRateMonitor", "--trainer.logger.init_args.save_dir", str(tmp_path),
              "--print_config"])  # fmt: skip
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "temperature: 0.3" in out and "max_epochs: 2" in out and "LearningRateMonitor" in out


def test_arguments_given_before_another_class_are_left_to_jsonargparse(
    capsys: pytest.CaptureFixture,
) -> None:
    """BayesNCL's config names arguments NCL does not take (``prior``, ``gate``, ...);
    ``--model NCL`` after it drops them, as jsonargparse does, instead of refusing them."""
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(DEMO / "digits_bayesncl.yaml"), "--model", "NCL",
              "--model.init_args.temperature", "0.3", "--print_config"])  # fmt: skip
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "class_path: ncl_lightning.NCL\n" in out and "temperature: 0.3" in out


@pytest.mark.slow
@pytest.mark.parametrize("subcommand", ["fit", "test"])
def test_malicious_checkpoint_is_refused_and_runs_nothing(
    subcommand: str, tmp_path: Path, bayesncl_ckpt: Path, capsys: pytest.CaptureFixture
) -> None:
    marker = tmp_path / "pwned"
    ckpt = torch.load(bayesncl_ckpt, weights_only=True)
    ckpt["payload"] = _Exploit(marker)
    evil = tmp_path / "evil.ckpt"
    torch.save(ckpt, evil)
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:
        main([subcommand, "--config", str(DEMO / "digits_bayesncl.yaml"), "--ckpt_path", str(evil),
              "--trainer.default_root_dir", str(out),
              "--trainer.logger.init_args.save_dir", str(out)])  # fmt: skip
    assert exit_info.value.code == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("ncl-cli: error:")]
    assert "refusing to load" in line and "evil.ckpt" in line and "execute code" in line
    assert not marker.exists() and not out.exists()


def test_traceback_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """``NCL_TRACEBACK=1`` lets the exception through (with its traceback)."""
    monkeypatch.setenv("NCL_TRACEBACK", "1")
    with pytest.raises((ValueError, SystemExit)):
        main(["fit", "--config", str(DEMO / "digits_ncl.yaml"), "--model.init_args.temperature",
              "-1", "--trainer.logger", "false"])  # fmt: skip
