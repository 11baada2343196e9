"""Study files: ``python -m ncl_lightning.studies.seeds my_study.yaml`` runs one's own rows
as a built-in study runs its own; every problem of the file is one line before any cell."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.foundation.resources import config_path
from ncl_lightning.studies import seeds
from ncl_lightning.studies.study_defs import CLASS_METRICS, Row, Study
from ncl_lightning.studies.study_file import load_study
from tests.helpers.tools import refused

TINY = (
    "--run-arg=--trainer.max_epochs=1",
    "--run-arg=--trainer.limit_train_batches=2",
    "--run-arg=--trainer.check_val_every_n_epoch=1",
)


def _write(folder: Path, text: str, name: str = "my_study.yaml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


def test_a_study_file_is_the_study_its_rows_describe(tmp_path: Path) -> None:
    mine = tmp_path / "my_configs"
    mine.mkdir()
    shutil.copy(config_path("demo/digits_ncl"), mine / "ncl.yml")
    path = _write(
        tmp_path,
        """
rows:
  - name: CL
    config: demo/digits_cl.yaml
  - name: NCL, soft gate
    config: my_configs/ncl.yml
    overlays: [ablations/soft_gate.yaml]
    args: [--model.init_args.prior, 0.7, --trainer.max_epochs=2]
baseline: CL
seed_keys: [data.init_args.seed]
curves: [val/z/semantic_consistency]
""",
    )
    study = load_study(path)
    # The same study written by hand: packaged names and the file, as absolute paths.
    expected = Study(
        "my_study",  # no title: the file's name
        (
            Row("CL", str(config_path("demo/digits_cl.yaml"))),
            Row(
                "NCL, soft gate",
                str((mine / "ncl.yml").resolve()),
                (str(config_path("ablations/soft_gate.yaml")),),
                ("--model.init_args.prior", "0.7", "--trainer.max_epochs=2"),
            ),
        ),
        CLASS_METRICS,  # no columns: the class metrics, as the built-in studies
        baseline="CL",
        seed_keys=("--data.init_args.seed",),
        curves=("val/z/semantic_consistency",),
    )
    assert study == expected
    (cl, ncl) = seeds.cells_of(study, [4], tmp_path / "out", [])
    configs = [ncl.command[i + 1] for i, a in enumerate(ncl.command) if a == "--config"]
    assert configs == [str((mine / "ncl.yml").resolve()), expected.rows[1].overlays[0]]
    assert ncl.command[ncl.command.index("--model.init_args.prior") + 1] == "0.7"
    assert ncl.command[ncl.command.index("--data.init_args.seed") + 1] == "4"
    assert ncl.root == tmp_path / "out" / "runs" / "ncl__soft_gate" / "seed_4"
    assert cl.command[cl.command.index("--config") + 1] == expected.rows[0].config


def test_config_paths_are_read_from_the_study_files_folder_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "studies").mkdir()
    (tmp_path / "work").mkdir()
    shutil.copy(config_path("demo/digits_cl"), tmp_path / "studies" / "cl.yaml")
    shutil.copy(config_path("demo/digits_ncl"), tmp_path / "work" / "cl.yaml")
    shutil.copy(config_path("demo/digits_ncl"), tmp_path / "work" / "only_here.yaml")
    path = _write(
        tmp_path / "studies",
        "title: t\nrows:\n  - {name: A, config: cl.yaml}\n  - {name: B, config: only_here.yaml}\n",
    )
    monkeypatch.chdir(tmp_path / "work")
    a, b = load_study(path).rows
    assert a.config == str((tmp_path / "studies" / "cl.yaml").resolve())  # beside the file
    assert b.config == str((tmp_path / "work" / "only_here.yaml").resolve())  # working folder


ROWS = "rows:\n  - {name: CL, config: demo/digits_cl.yaml}\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (ROWS + "colour: red\n", "{f}: colour: unknown key; the keys are title, rows,"),
        (
            "rows:\n  - {name: CL, config: demo/digits_cl.yaml, colour: red}\n",
            "{f}: rows[0] (CL): colour: unknown key; the keys are name, config,",
        ),
        (
            "rows:\n  - {name: CL, config: nope.yaml}\n",
            "{f}: rows[0] (CL): config: no config file 'nope.yaml' ({tmp}/nope.yaml",
        ),
        (
            ROWS + "  - {name: NCL, config: demo/digits_ncl.yaml, overlays: [nope.yaml]}\n",
            "{f}: rows[1] (NCL): overlays[0]: no config file 'nope.yaml'",
        ),
        (
            "rows:\n  - {name: CL, config: broken.yaml}\n",
            "{f}: rows[0] (CL): config: {tmp}/broken.yaml: config file holds a list",
        ),
        ("rows:\n  - {name: CL}\n", "{f}: rows[0] (CL): config: missing; every row has"),
        (
            ROWS + "columns: [val/online_acc, val/accuracy]\n",
            "{f}: columns[1]: unknown column 'val/accuracy'; known: ['val/classifier/acc_top1'",
        ),
        (ROWS + ROWS[6:], "{f}: rows[1] (CL): name: same name; rename one"),
        (
            ROWS + "  - {name: cl, config: demo/digits_ncl.yaml}\n",
            "{f}: rows[1] (cl): name: same folder as row 'CL'; rename one",
        ),
        (ROWS + "baseline: NCL\n", "{f}: baseline: 'NCL' is not a row; rows: ['CL']"),
        ("title: t\n", "{f}: rows: missing; give the rows to compare"),
        ("rows: []\n", "{f}: rows: expected a non-empty list of rows, got []"),
        (
            "rows:\n  - {name: CL, config: demo/digits_cl.yaml, args: [--seed_everything=3]}\n",
            "{f}: rows[0] (CL): args: --seed_everything=3 would change seed_everything, which",
        ),
        (
            "rows:\n  - {name: CL, config: demo/digits_cl.yaml, args: --trainer.max_epochs=2}\n",
            "{f}: rows[0] (CL): args: expected a list, got '--trainer.max_epochs=2'",
        ),
        (
            "rows:\n  - {name: CL, config: demo/digits_cl.yaml, args: [2]}\n",
            "{f}: rows[0] (CL): args: '2' is not an option; give ncl-cli options such as --tr",
        ),
        ("rows:\n  - {name: CL, config: [demo/digits_cl.yaml\n", "{f}:3:1: YAML syntax error"),
        ("- CL\n", "{f}: study file holds a list at the top level; expected a mapping with rows:"),
    ],
)
def test_every_problem_of_a_study_file_is_one_line_before_any_cell(
    tmp_path: Path, capsys: pytest.CaptureFixture, text: str, expected: str
) -> None:
    (tmp_path / "broken.yaml").write_text("- not a mapping\n")
    path = _write(tmp_path, text)
    for argv in ([str(path)], ["--study-file", str(path)]):
        argv += ["--out", str(tmp_path / "out")]
        message = refused(seeds.main, argv, seeds.PROG, tmp_path, capsys)
        assert message.startswith(expected.format(f=path, tmp=tmp_path.resolve())), message


def test_a_missing_study_file_or_two_studies_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = ["--out", str(tmp_path / "out")]
    missing = tmp_path / "none.yaml"
    assert refused(seeds.main, [str(missing), *out], seeds.PROG, tmp_path, capsys) == (
        f"{missing}: study file not found"
    )
    path = _write(tmp_path, ROWS)
    both = ["demo", "--study-file", str(path), *out]
    assert "give a study name ('demo') or a study file, not both" in refused(
        seeds.main, both, seeds.PROG, tmp_path, capsys
    )
    with pytest.raises(ConfigError, match="folder, not a file"):
        load_study(tmp_path)


@pytest.mark.slow
def test_a_study_file_runs_end_to_end_and_writes_the_built_in_table(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copy(config_path("demo/digits_ncl"), tmp_path / "my_ncl.yaml")
    path = _write(
        tmp_path,
        "title: CL against my NCL\nrows:\n"
        "  - {name: CL, config: demo/digits_cl.yaml}\n"
        "  - {name: my NCL, config: my_ncl.yaml, args: [--model.init_args.temperature, 0.5]}\n"
        "columns: [val/online_acc, val/z/sparsity]\nbaseline: CL\n",
    )
    monkeypatch.chdir(tmp_path)  # the default output folder: runs/studies/my_study
    seeds.main([str(path), "--seeds", "1", "--workers", "2", *TINY])  # several: test_seeds
    out = tmp_path / "runs" / "studies" / "my_study"
    records = json.loads((out / "results.json").read_text())
    assert sorted((r["row"], r["seed"]) for r in records) == [("CL", 1), ("my NCL", 1)]
    command = (out / "runs" / "my_ncl" / "seed_1" / "command.txt").read_text()
    assert f"--config {(tmp_path / 'my_ncl.yaml').resolve()}" in command
    assert "--model.init_args.temperature 0.5 --seed_everything 1" in command
    # command.txt pastes into a shell where ncl-cli is installed, as it is
    assert command.startswith("OMP_NUM_THREADS=1 WANDB_MODE=offline ncl-cli fit --config ")
    path_env = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    shown = subprocess.run(["bash", "-c", command.strip() + " --print_config"], env={
        **os.environ, "PATH": path_env}, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert "temperature: 0.5" in shown.stdout and "seed_everything: 1" in shown.stdout
    # The table is the built-in report of the same study on the same records.
    table = (out / "table.md").read_text()
    assert table == f"## CL against my NCL\n\n{seeds.report(records, load_study(path))}"
    assert "| row | seeds | online linear acc (%) | z sparsity (%) |" in table
    assert "| my NCL | 1 |" in table and "Per seed (1):" in table
    assert "Written: " in capsys.readouterr().out


def test_the_study_file_shown_in_the_docs_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "results.md").read_text()
    (block,) = [b.split("```", 1)[0] for b in page.split("```yaml\n")[1:] if "rows:" in b]
    (tmp_path / "my_configs").mkdir()
    shutil.copy(config_path("demo/digits_ncl"), tmp_path / "my_configs" / "ncl.yaml")
    monkeypatch.chdir(tmp_path)
    study = load_study(_write(tmp_path, block))
    assert [row.name for row in study.rows] == ["CL", "my NCL"] and study.baseline == "CL"
    assert study.rows[1].args == ("--model.init_args.temperature", "0.5")
