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
