"""The evaluation chain over several seeds: aggregation and an end-to-end digits run."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
import yaml

from ncl_lightning.studies import chain
from ncl_lightning.studies.chain_seeds import (
    aggregate,
    combined_rows,
    exceeding,
    report,
    sweep_table,
)
from tests.conftest import ROOT

SEEDS = (0, 1, 2)


def _per_seed() -> dict[int, dict]:
    """Three seeds: ``a`` and ``b`` have kNN and z consistency; ``a`` lacks linear top-1 in
    seed 1; ``b`` has no selection anywhere; ``a`` has selection (k 32 of 4..64) twice."""
    per_seed: dict[int, dict] = {}
    for s in SEEDS:
        a = {
            "pretrain": {"val/z/semantic_consistency": 70.0 + s},
            "knn": {"test/offline_knn/acc_top1": 0.97 + 0.002 * s},
        }
        if s != 1:
            a["linear"] = {"val/offline_linear/acc_top1": 0.90 + 0.01 * s}
        if s < 2:
            a["selection"] = {
                f"test/selection/{rule}/k{k}/linear_acc": 0.5 + k / 200 + 0.01 * s
                for rule in ("ea", "random")
                for k in (4, 32, 64)
            }
        b = {
            "pretrain": {"val/z/semantic_consistency": 10.0 + 0.5 * s},
            "knn": {"test/offline_knn/acc_top1": 0.95 - 0.003 * s},
            "linear": {"val/offline_linear/acc_top1": 0.93 + 0.002 * s},
        }
        per_seed[s] = {"a": a, "b": b}
    return per_seed


def _reference(values: list[float]) -> str:
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.1f} ± {std:.1f}"


def test_aggregation_against_statistics() -> None:
    per_seed = _per_seed()
    table = aggregate(per_seed)
    rows = combined_rows(table)
    scaled = {
        "kNN top-1": ("knn", "test/offline_knn/acc_top1", 100),
        "linear top-1": ("linear", "val/offline_linear/acc_top1", 100),
        "z consistency": ("pretrain", "val/z/semantic_consistency", 1),
        "EA@32 linear": ("selection", "test/selection/ea/k32/linear_acc", 100),
        "random@32 linear": ("selection", "test/selection/random/k32/linear_acc", 100),
    }
    for run in ("a", "b"):
        for column, (protocol, key, scale) in scaled.items():
            values = [
                scale * per_seed[s][run][protocol][key]
                for s in SEEDS
                if key in per_seed[s][run].get(protocol, {})
            ]
            assert rows[run][column] == (_reference(values) if values else ""), (run, column)
    assert list(table["a"]["linear top-1"]) == [0, 2]  # seed 1 had none: the others count
    assert list(table["a"]["EA@32 linear"]) == [0, 1]
    for column in ("fine-tune top-1", "supervised top-1", "online linear"):  # nowhere
        assert rows["a"][column] == rows["b"][column] == "" and table["a"][column] == {}
    # differences beyond the spread, against statistics
    expected = []
    for column in rows["a"]:
        va, vb = (list(table[r][column].values()) for r in ("a", "b"))
        if len(va) > 1 and len(vb) > 1:
            (ma, sa), (mb, sb) = ((statistics.mean(v), statistics.stdev(v)) for v in (va, vb))
            if abs(ma - mb) > sa + sb and f"{ma:.1f}" != f"{mb:.1f}":
                hi, lo = ("a", "b") if ma > mb else ("b", "a")
                expected.append(f"{column}: {hi} {rows[hi][column]} > {lo} {rows[lo][column]}")
    lines = exceeding(table)
    assert lines == expected and "kNN top-1: a 97.2 ± 0.2 > b 94.7 ± 0.3" in lines
    b_first = aggregate({s: {"b": r["b"], "a": r["a"]} for s, r in per_seed.items()})
    assert list(b_first["b"]) == list(table["a"])  # columns in the table's order
    text = report(table, list(SEEDS))
    assert "- linear top-1: a 90.0 / – / 92.0; b 93.0 / 93.2 / 93.4" in text
    header = text.splitlines()[0]
    assert "fine-tune top-1" not in header and "EA@32 linear" in header  # empty columns dropped


def test_means_equal_at_one_decimal_are_not_a_difference() -> None:
    # Dense CL against CE: sparsities 0.0001 % and 0.0 % with no spread are both "0.0".
    table = {
        "cl": {"z sparsity": {0: 0.0001, 1: 0.0001}, "z consistency": {0: 10.3, 1: 10.3}},
        "ce": {"z sparsity": {0: 0.0, 1: 0.0}, "z consistency": {0: 10.3001, 1: 10.3001}},
        "ncl": {"z sparsity": {0: 93.9, 1: 93.7}, "z consistency": {0: 71.0, 1: 71.2}},
    }
    lines = exceeding(table)
    assert not any({"cl", "ce"} <= set(line.split()) for line in lines)
    assert len(lines) == 4  # ncl against each of the two, in both columns


@pytest.mark.slow
def test_two_seeds_on_digits_and_a_rerun_that_trains_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    short = ["--trainer.max_epochs", "1", "--trainer.check_val_every_n_epoch", "1"]
    argv = ["--pretrain", str(ROOT / "configs" / "demo" / "digits_ncl.yaml")]
    argv += ["--linear", str(ROOT / "configs" / "eval" / "digits_linear.yaml")]
    argv += ["--knn", str(ROOT / "configs" / "eval" / "digits_knn.yaml")]
    argv += ["--out", str(tmp_path), "--seeds", "3", "7"]
    argv += [f"--pretrain-arg={a}" for a in short] + [f"--eval-arg={a}" for a in short]
    per_seed = chain.main(argv)
    assert set(per_seed) == {3, 7}
    for seed in (3, 7):
        folder = tmp_path / f"seed_{seed}"
        assert set(json.loads((folder / "results.json").read_text())) == {"digits_ncl"}
        assert "| digits_ncl |" in (folder / "results.md").read_text()
        configs = sorted((folder / "digits_ncl").rglob("config.yaml"))
        assert {c.relative_to(folder / "digits_ncl").parts[0] for c in configs} == {
            "pretrain", "linear", "knn"
        }  # fmt: skip
        for config in configs:
            assert yaml.safe_load(config.read_text())["seed_everything"] == seed, config
    assert per_seed[3] != per_seed[7]  # the seeds made different runs
    text = (tmp_path / "results.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| digits_ncl |"))
    assert row.count(" ± ") >= 4 and "kNN top-1" in text.splitlines()[0]
    assert "Per seed (3 / 7):" in text
    assert set(json.loads((tmp_path / "results_seeds.json").read_text())) == {"3", "7"}
    capsys.readouterr()

    def no_training(*args, **kwargs):
        raise AssertionError("a rerun retrained")

    monkeypatch.setattr(chain, "_run", no_training)
    assert chain.main(argv) == per_seed
    assert capsys.readouterr().err.count("done before: ") == 6
    assert (tmp_path / "results.md").read_text() == text


def test_sweep_table_is_mean_and_std_over_seeds_for_every_run_rule_and_k() -> None:
    def selection(acc16: float, acc32: float) -> dict:
        return {
            "test/selection/ea/k16/linear_acc": acc16,
            "test/selection/ea/k16/retrieval_p@10": acc16 / 2,
            "test/selection/ea/k32/linear_acc": acc32,
            "test/selection/ea/k32/retrieval_p@10": acc32 / 2,
        }

    per_seed = {
        0: {"a": {"selection": selection(0.80, 0.90)}},
        1: {"a": {"selection": selection(0.84, 0.92)}},
        2: {"a": {"selection": selection(0.82, 0.94)}, "b": {"pretrain": {}}},
    }
    table = sweep_table(per_seed)
    k16 = [80.0, 84.0, 82.0]
    ref = f"{statistics.mean(k16):.1f} ± {statistics.stdev(k16):.1f}"  # 82.0 ± 2.0
    p10 = [v / 2 for v in k16]
    ref_p = f"{statistics.mean(p10):.1f} ± {statistics.stdev(p10):.1f}"
    assert table.splitlines()[0] == "| run | rule | k = 16 | k = 32 |"
    assert table.splitlines()[2] == f"| a | ea | {ref} / {ref_p} | 92.0 ± 2.0 / 46.0 ± 1.0 |"
    assert len(table.splitlines()) == 3  # b has no selection results
    assert sweep_table({0: {"b": {"pretrain": {}}}}) == ""
