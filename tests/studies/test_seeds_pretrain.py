"""A study row with a ``pretrain`` config: the run it fine-tunes from, with the same seed.

The ``nce-digits`` study (NCL paper Table 4) fine-tunes NCE from a CL run: each seed's CL
run is trained once under ``<out>/pretrain/``, before the cells, shared by every row
naming it and reused on resume; its ``last.ckpt`` is the cell's
``--model.init_args.pretrained``. The slow test checks what the fine-tuned runs started
from against the CL checkpoints, read the plain way.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.resources import config_path
from ncl_lightning.studies import seeds
from ncl_lightning.studies.study_defs import STUDIES, Row, Study
from tests.helpers.start_weights import CALLBACK, at_start, backbone_of, same
from tests.helpers.tools import refused
from tests.studies.test_seeds import cells_in_process  # noqa: F401 (a fixture)

TINY = (
    "--trainer.max_epochs=1",
    "--trainer.limit_train_batches=2",
    "--trainer.limit_val_batches=1",
    "--trainer.check_val_every_n_epoch=1",
)
FINETUNE = "demo/digits_nce_finetune.yaml"
CL = "demo/digits_cl.yaml"


def _configs(command: list[str]) -> list[str]:
    return [command[i + 1] for i, a in enumerate(command) if a == "--config"]


def test_the_finetuned_row_names_the_checkpoint_of_its_seeds_cl_run(tmp_path: Path) -> None:
    study = STUDIES.get("nce-digits")()
    cells = seeds.cells_of(study, [0, 3], tmp_path, ["--trainer.max_epochs=1"])
    tuned = [c for c in cells if c.pretrain is not None]
    assert {c.row for c in tuned} == {"NCE from CL (5 epochs)"} and len(tuned) == 2
    assert all(c.pretrain is None for c in cells if c not in tuned)
    for cell in tuned:
        first = cell.pretrain
        assert first.seed == cell.seed
        assert first.root == tmp_path / "pretrain" / "demo_digits_cl" / f"seed_{cell.seed}"
        assert _configs(first.command) == [str(config_path(CL))]
        assert first.command[first.command.index("--seed_everything") + 1] == str(cell.seed)
        assert seeds.PRETRAINED not in first.command
        assert first.command[-1] == "--trainer.max_epochs=1"  # the extras reach it too
        at = cell.command.index(seeds.PRETRAINED)
        assert cell.command[at + 1] == str(first.checkpoint)
        assert at > max(i for i, a in enumerate(cell.command) if a == "--config")
        assert _configs(cell.command) == [str(config_path(FINETUNE))]
    no_projector = next(c for c in cells if c.row == "NCE, no projector")
    assert _configs(no_projector.command)[-1] == str(config_path("nce/overlays/no_projector.yaml"))


def test_the_study_owns_pretrained_and_checks_the_pretrain_config(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    argv = ["nce-digits", "--out", str(tmp_path / "s"), "--run-arg=--model.init_args.pretrained=x"]
    message = refused(seeds.main, argv, seeds.PROG, tmp_path, capsys)
    assert "--run-arg: --model.init_args.pretrained=x would change model.init_args.pretrained" in (
        message
    )
    bad = Study("bad", (Row("tuned", FINETUNE, pretrain="demo/nope.yaml"),), ("val/z/sparsity",))
    with pytest.raises(ConfigError, match=r"no packaged config 'demo/nope\.yaml'"):
        seeds.run_study(bad, tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


@pytest.mark.slow
@pytest.mark.usefixtures("cells_in_process")
def test_each_seed_finetunes_from_its_own_cl_run_trained_once(tmp_path: Path) -> None:
    out = tmp_path / "study"
    rows = (
        Row("A", FINETUNE, pretrain=CL),
        Row("B", FINETUNE, ("nce/overlays/no_projector.yaml",), pretrain=CL),
    )
    study = Study("two fine-tunes", rows, ("val/classifier/acc_top1", "val/z/sparsity"))
    seeds.run_study(study, out, seeds=[0, 1], workers=2, extra=(*TINY, CALLBACK), rows=["A"])
    cl_runs = sorted(p.relative_to(out).as_posix() for p in out.glob("pretrain/*/seed_*"))
    assert cl_runs == ["pretrain/demo_digits_cl/seed_0", "pretrain/demo_digits_cl/seed_1"]
    checkpoint = {s: out / f"pretrain/demo_digits_cl/seed_{s}/logs/version_0/checkpoints/last.ckpt"
                  for s in (0, 1)}  # fmt: skip
    reference = {s: backbone_of(path) for s, path in checkpoint.items()}
    assert not same(reference[0], reference[1])  # the seeds' CL runs differ
    # Row B with seed 0: the CL run of seed 0 is shared, not trained again.
    logs = {p: p.stat().st_mtime_ns for p in out.rglob("fit.log")}
    assert len(logs) == 4
    seeds.run_study(study, out, seeds=[0], workers=1, extra=(*TINY, CALLBACK), rows=["B"])
    assert {p: p.stat().st_mtime_ns for p in logs} == logs
    records = json.loads((out / "results.json").read_text())
    rows_seeds = sorted((r["row"], r["seed"]) for r in records)
    assert rows_seeds == [("A", 0), ("A", 1), ("B", 0)]  # the CL runs are no rows of the table
    for record in records:
        seed, root = record["seed"], Path(record["checkpoint"]).parents[3]
        assert record["pretrained"] == str(checkpoint[seed])
        started = at_start(root)
        assert same(started, reference[seed]) and not same(started, reference[1 - seed])
        assert 0.0 <= record["metrics"]["val/classifier/acc_top1"] <= 1.0
    # Resume: nothing is trained again, CL runs included.
    logs = {p: p.stat().st_mtime_ns for p in out.rglob("fit.log")}
    assert len(logs) == 5
    seeds.run_study(study, out, seeds=[0, 1], workers=1, extra=(*TINY, CALLBACK), rows=["A"])
    seeds.run_study(study, out, seeds=[0], workers=1, extra=(*TINY, CALLBACK))
    assert {p: p.stat().st_mtime_ns for p in out.rglob("fit.log")} == logs
