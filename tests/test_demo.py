"""The demo driver: both configs through ncl-cli, one table, written under the run dir."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ncl_lightning.demo import main


@pytest.mark.slow
def test_demo_writes_side_by_side_table(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    extra = ["--trainer.max_epochs", "1", "--trainer.check_val_every_n_epoch", "1",
             "--trainer.enable_progress_bar", "false"]  # fmt: skip
    report = main(["--out", str(tmp_path), *extra])
    written = (tmp_path / "results.md").read_text()
    assert written == report
    rows = {
        line.split("|")[1].strip(): line for line in written.splitlines() if line.startswith("| ")
    }
    assert set(rows) == {"method", "CL", "NCL", "BayesNCL"}
    cl_sparsity = rows["CL"].split("|")[4].strip()
    print(f"measured: CL z sparsity {cl_sparsity}")
    # CL features are dense; a few entries may fall under the 1e-5 threshold on some hosts
    assert cl_sparsity.endswith("%") and float(cl_sparsity[:-1]) < 1.0, rows["CL"]
    assert "/ 64" in rows["NCL"]
    assert "%" in rows["BayesNCL"].split("|")[-2]  # the gate open rate column
    for run in ("digits_cl", "digits_ncl", "digits_bayesncl"):
        assert list((tmp_path / run).rglob("last.ckpt")), run
    assert (tmp_path / "top_activations_cl_vs_ncl_vs_bayesncl.png").is_file()
    curves = tmp_path / "curves.png"  # the three runs' training curves on shared panels
    assert curves.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = capsys.readouterr()
    assert "curves.png" in printed.out
    for k in (1, 2, 3):  # one progress line per run, with elapsed time and ETA
        assert re.search(rf"\[run {k}/3\] done in .*\| elapsed .*\| ETA", printed.err), k
