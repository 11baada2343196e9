"""The chain's ``--spaces h z p``: linear probe and fine-tuning on ``h``, on ``z`` and on
the raw projector output ``p`` (NCL paper, Table 7), their runs, table columns and the
within-run comparison over seeds."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from ncl_lightning.foundation.errors import ConfigError
from ncl_lightning.studies import chain
from ncl_lightning.studies.chain import protocol_runs
from ncl_lightning.studies.chain_seeds import aggregate, exceeding_spaces, report
from ncl_lightning.studies.chain_table import table_row

PROTOCOLS = {
    "linear": Path("lin.yaml"),
    "knn": Path("knn.yaml"),
    "selection": None,
    "finetune": Path("ft.yaml"),
}
Z = ["--model.init_args.space", "z"]


def test_protocol_runs_per_space() -> None:
    assert protocol_runs(PROTOCOLS) == [
        ("linear", "linear", Path("lin.yaml"), []),
        ("knn", "knn", Path("knn.yaml"), []),
        ("finetune", "finetune", Path("ft.yaml"), []),
    ]
    assert protocol_runs(PROTOCOLS, ("h", "z")) == [
        ("linear", "linear", Path("lin.yaml"), []),
        ("linear_z", "linear", Path("lin.yaml"), Z),
        ("knn", "knn", Path("knn.yaml"), []),
        ("finetune", "finetune", Path("ft.yaml"), []),
        ("finetune_z", "finetune", Path("ft.yaml"), Z),
    ]
    assert [key for key, *_ in protocol_runs(PROTOCOLS, ("z",))] == [
        "linear_z",
        "knn",
        "finetune_z",
    ]
    assert protocol_runs(PROTOCOLS, ("h", "p"))[1] == (
        "linear_p", "linear", Path("lin.yaml"), ["--model.init_args.space", "p"]
    )  # fmt: skip
    with pytest.raises(ConfigError, match=r"^spaces must be one of 'h', 'z', 'p', got 'q'$"):
        protocol_runs(PROTOCOLS, ("h", "q"))


def _fake_run(calls: list, ckpt: Path):
    """``chain._run`` without ncl-cli: metrics named after the run folder."""

    def run(subcommand, config, root, extra, verbose=False):
        calls.append((subcommand, root.name, list(extra)))
        value = {"linear": 0.90, "linear_z": 0.80, "finetune": 0.95, "finetune_z": 0.85}
        value |= {"linear_p": 0.70, "finetune_p": 0.75}
        if root.name == "pretrain":
            return {"val/z/sparsity": 0.5, "_last_ckpt": str(ckpt)}
        protocol, _, space = root.name.partition("_")
        label = {"linear": "offline_linear", "finetune": "offline_finetune"}.get(
            protocol, "offline_knn"
        )
        label += f"_{space}" if space else ""
        stage = "test" if subcommand == "test" else "val"
        metrics = {f"{stage}/{label}/acc_top1": value.get(root.name, 0.5)}
        if subcommand == "fit":
            metrics["_last_ckpt"] = "probe.ckpt"
        return metrics

    return run


def test_main_runs_each_probe_per_space_and_reruns_a_chain_without_z(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    ckpt = tmp_path / "last.ckpt"
    ckpt.touch()
    calls: list = []
    monkeypatch.setattr(chain, "_run", _fake_run(calls, ckpt))
    monkeypatch.chdir(tmp_path)  # the config files exist (the chain checks), runs are faked
    for name in ("a", "lin", "ft", "knn"):
        (tmp_path / f"{name}.yaml").write_text("{}\n")
    out = tmp_path / "out"
    argv = ["--pretrain", "a.yaml", "--linear", "lin.yaml", "--finetune", "ft.yaml"]
    argv += ["--knn", "knn.yaml", "--out", str(out)]
    # --spaces h (the default): what the chain always ran, and the table it always wrote
    chain.main(argv)
    assert [c[1] for c in calls] == ["pretrain", "linear", "knn", "finetune"]
    assert not any("--model.init_args.space" in c[2] for c in calls)
    results = json.loads((out / "results.json").read_text())
    assert set(results["a"]) == {"pretrain", "linear", "knn", "finetune"}
    header = (out / "results.md").read_text().splitlines()[0]
    assert "linear top-1" in header and "z linear" not in header
    capsys.readouterr()
    # the same folder with --spaces h z: the config lacks the z runs, so it runs again
    calls.clear()
    chain.main([*argv, "--spaces", "h", "z"])
    err = capsys.readouterr().err
    assert [c[1] for c in calls] == [
        "pretrain", "linear", "linear_z", "knn", "finetune", "finetune_z"
    ]  # fmt: skip
    assert "[run 3/6] a linear_z" in err and "[run 6/6] a finetune_z" in err
    for subcommand, name, extra in calls[1:]:
        assert subcommand == ("test" if name == "knn" else "fit")
        assert extra[:2] == ["--model.init_args.checkpoint", str(ckpt)]
        assert (extra[-2:] == Z) == name.endswith("_z")
    results = json.loads((out / "results.json").read_text())
    assert results["a"]["linear_z"] == {"val/offline_linear_z/acc_top1": 0.80}
    assert results["a"]["finetune_z"] == {"val/offline_finetune_z/acc_top1": 0.85}
    row = table_row(results["a"])
    assert row["linear top-1"] == "90.0" and row["z linear top-1"] == "80.0"
    assert row["fine-tune top-1"] == "95.0" and row["z fine-tune top-1"] == "85.0"
    header = (out / "results.md").read_text().splitlines()[0]
    assert header.index("linear top-1") < header.index("z linear top-1") < header.index("kNN")
    # a rerun trains nothing
    calls.clear()
    chain.main([*argv, "--spaces", "h", "z"])
    assert calls == [] and capsys.readouterr().err.count("done before: ") == 6
    # --spaces h z p adds the raw projector output p (the release's Table 7 space)
    chain.main([*argv, "--spaces", "h", "z", "p"])
    assert [c[1] for c in calls] == [
        "pretrain", "linear", "linear_z", "linear_p", "knn", "finetune", "finetune_z",
        "finetune_p",
    ]  # fmt: skip
    assert calls[3][2][-2:] == ["--model.init_args.space", "p"]
    row = table_row(json.loads((out / "results.json").read_text())["a"])
    assert row["p linear top-1"] == "70.0" and row["p fine-tune top-1"] == "75.0"


def _table(values: dict[str, dict[str, list[float]]]) -> dict:
    """Seeds 0.. of each run's results from ``{run: {protocol: [accuracy per seed]}}``."""
    keys = {
        "linear": "val/offline_linear/acc_top1",
        "linear_z": "val/offline_linear_z/acc_top1",
        "finetune": "val/offline_finetune/acc_top1",
        "finetune_z": "val/offline_finetune_z/acc_top1",
        "linear_p": "val/offline_linear_p/acc_top1",
    }
    n = len(next(iter(next(iter(values.values())).values())))
    return {
        s: {
            run: {p: {keys[p]: v[s]} for p, v in protocols.items()}
            for run, protocols in values.items()
        }
        for s in range(n)
    }


def test_h_against_z_and_p_beyond_the_spread_within_a_run() -> None:
    values = {
        "cl": {"linear": [0.95, 0.94, 0.96], "linear_z": [0.80, 0.82, 0.78],
               "finetune": [0.95, 0.96, 0.94], "finetune_z": [0.95, 0.93, 0.96]},
        "ncl": {"linear": [0.90, 0.91, 0.92], "linear_z": [0.95, 0.96, 0.97],
                "linear_p": [0.80, 0.81, 0.79]},
    }  # fmt: skip
    table = aggregate(_table(values))
    expected = []
    for run, protocols in values.items():
        for h, column in (("linear", "linear top-1"), ("finetune", "fine-tune top-1")):
            for space in ("z", "p"):
                if f"{h}_{space}" not in protocols:
                    continue
                vh = [100 * v for v in protocols[h]]
                vs = [100 * v for v in protocols[f"{h}_{space}"]]
                (mh, sh), (ms, ss) = ((statistics.mean(v), statistics.stdev(v)) for v in (vh, vs))
                if abs(mh - ms) > sh + ss:
                    a, b = f"h {mh:.1f} ± {sh:.1f}", f"{space} {ms:.1f} ± {ss:.1f}"
                    hi, lo = (a, b) if mh > ms else (b, a)
                    expected.append(f"{column}: {run} {hi} > {lo}")
    lines = exceeding_spaces(table)
    assert lines == expected
    assert lines == [
        "linear top-1: cl h 95.0 ± 1.0 > z 80.0 ± 2.0",
        "linear top-1: ncl z 96.0 ± 1.0 > h 91.0 ± 1.0",
        "linear top-1: ncl h 91.0 ± 1.0 > p 80.0 ± 1.0",
    ]
    text = report(table, [0, 1, 2])
    assert "Within a run, h against z or p, beyond the spread:" in text
    assert "- linear top-1: ncl z 96.0 ± 1.0 > h 91.0 ± 1.0" in text
    h_only = aggregate(_table({"cl": {"linear": [0.95, 0.94, 0.96]}}))
    assert exceeding_spaces(h_only) == [] and "Within a run" not in report(h_only, [0, 1, 2])
