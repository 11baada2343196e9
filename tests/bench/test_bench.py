"""The benchmark runs end to end on small data (its figures are measured, never asserted)."""

from __future__ import annotations

import pytest

from ncl_lightning.bench import BENCHMARKS, format_table
from ncl_lightning.bench.__main__ import main
from ncl_lightning.bench.metrics import run


def test_metrics_benchmark_produces_every_row_on_small_data() -> None:
    rows = run(repeats=1, num_samples=600, num_features=24)
    table = format_table(rows)
    for what in ("SEPIN", "loop", "retrieval", "SemanticEntropy", "EffectiveRank"):
        assert what in table
    assert all(row.seconds >= 0 for row in rows)


def test_unknown_benchmark_name_is_refused_before_work(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as err:
        main(["nonesuch"])
    assert err.value.code == 2
    assert "valid names: " + ", ".join(BENCHMARKS.names) in capsys.readouterr().err


def test_step_benchmark_times_ncl_and_bayesncl_on_small_batches() -> None:
    from ncl_lightning.bench.step import run as run_step

    ncl, bayes = run_step(repeats=1, batch_size=4, image_size=8)
    assert ncl.what.startswith("NCL") and bayes.what.startswith("BayesNCL")
    assert bayes.goal == 1.10 * ncl.seconds and "ratio" in bayes.note
