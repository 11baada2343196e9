"""The whole evaluation chain on the real CIFAR-10 subset, through ncl-cli."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from ncl_lightning.studies import chain
from ncl_lightning.studies.chain import run_chain
from ncl_lightning.studies.chain_table import markdown, table_row
from tests.conftest import ROOT, subset_copy
from tests.fakes import make_superclass_folder

EVAL = ROOT / "configs" / "eval"
TRAIN, VAL = 60, 20  # images of every class taken from the real subset (of 71-113)


def small_subset(root: Path) -> Path:
    """The first ``TRAIN`` training and ``VAL`` validation images of every class."""
    return subset_copy(root, TRAIN, VAL)


@pytest.mark.slow
def test_pretrain_probe_knn_selection_on_real_cifar(
    cifar_subset: Path,
    tmp_path: Path,
    capfd: pytest.CaptureFixture,
    caplog: pytest.LogCaptureFixture,
) -> None:
    cifar = small_subset(tmp_path / "cifar")
    data = ["--data.init_args.root", str(cifar), "--data.init_args.num_workers", "0"]
    vehicles = ["airplane", "automobile", "ship", "truck"]
    animals = ["bird", "cat", "deer", "dog", "frog", "horse"]
    transfer_root = make_superclass_folder(
        cifar, tmp_path / "transfer", {"animal": animals, "vehicle": vehicles}
    )
    transfer = json.dumps({
        "class_path": "ncl_lightning.data.ImageFolderDataModule",
        "init_args": {"root": str(transfer_root), "image_size": 32, "num_workers": 0},
    })  # fmt: skip
    caplog.set_level(logging.INFO, logger="lightning.pytorch")  # banners on unless quieted
    results = run_chain(
        ROOT / "configs" / "subset" / "cifar10_subset_ncl.yaml",
        {
            "linear": EVAL / "cifar10_subset_linear.yaml",
            "knn": EVAL / "cifar10_subset_knn.yaml",
            "selection": EVAL / "cifar10_subset_feature_selection.yaml",
        },
        tmp_path,
        pretrain_args=[
            "--trainer.max_epochs",
            "1",
            "--trainer.check_val_every_n_epoch",
            "1",
            *data,
        ],
        eval_args=data,
        protocol_args={
            "linear": ["--trainer.max_epochs", "1", "--trainer.check_val_every_n_epoch", "1"],
            "selection": [
                "--model.init_args.ks",
                "[16, 256]",
                "--model.init_args.probe_epochs",
                "3",
                "--model.init_args.transfer",
                transfer,
            ],
        },
    )
    err = capfd.readouterr().err
    for k, run in enumerate(("pretrain", "linear", "knn", "selection"), 1):
        assert f"[run {k}/4] cifar10_subset_ncl {run} | elapsed " in err
        assert f"[run {k}/4] done in " in err
    assert "ETA ?" in err and "[run] 4/4 done in " in err
    for banner in ("GPU available", "LOCAL_RANK", "`Trainer.fit` stopped", "Test metric"):
        assert banner not in err + caplog.text
    assert logging.getLogger("lightning.pytorch").level == logging.INFO  # restored
    assert results["pretrain"]["val/z/sparsity"] > 0  # NCL features after one epoch
    for key in ("val/offline_linear/acc_top1", "val/offline_linear/acc_top5"):
        assert 0.0 <= results["linear"][key] <= 1.0
    assert results["knn"]["test/offline_knn/acc_top1"] > 0.15  # chance: 0.10; measured 0.26
    sel = results["selection"]
    # keeping every dim, the EA and random rules keep the same set: same probe
    all_ea, all_rand = (
        sel["test/selection/ea/k256/linear_acc"],
        sel["test/selection/random/k256/linear_acc"],
    )
    assert abs(all_ea - all_rand) < 0.01
    assert "test/selection/ea/k16/retrieval_p@10" in sel
    # animal vs vehicle on the same real images: a second task the features transfer to
    assert sel["test/selection/ea/k256/transfer_acc"] > 0.6  # majority: 0.6; measured 0.745
    run = next((tmp_path / "cifar10_subset_ncl" / "selection").rglob("feature_selection.json"))
    assert set(json.loads(run.read_text())) == {"ea", "random"}
    assert (run.parent / "accuracy_vs_k.png").stat().st_size > 0
    row = table_row(results)
    assert row["EA@16 linear"] and row["linear top-1"]
    assert "| cifar10_subset_ncl |" in markdown({"cifar10_subset_ncl": row})


def test_main_announces_every_run_and_the_runs_done_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Run counting of ``main`` across configs (the runs themselves faked: the real chain
    above checks the lines of real runs); a rerun reports the finished config's runs."""
    ckpt = tmp_path / "last.ckpt"
    ckpt.touch()
    calls = []

    def fake_run(subcommand, config, root, extra, verbose=False):
        calls.append((subcommand, root.name, verbose))
        return {"val/z/sparsity": 0.5, "_last_ckpt": str(ckpt)}

    monkeypatch.setattr(chain, "_run", fake_run)
    monkeypatch.chdir(tmp_path)  # the config files exist (the chain checks), runs are faked
    for name in ("a", "b", "knn", "lin", "ce"):
        (tmp_path / f"{name}.yaml").write_text("{}\n")
    argv = ["--pretrain", "a.yaml", "b.yaml", "--knn", "knn.yaml", "--linear", "lin.yaml"]
    argv += ["--supervised", "ce.yaml", "--out", str(tmp_path / "out")]
    chain.main(argv)
    err = capsys.readouterr().err
    assert [line.split("]")[0] for line in err.splitlines() if " | elapsed " in line] == [
        f"[run {k}/7" for k in range(1, 8) for _ in range(2)
    ]
    assert "[run 4/7] b pretrain" in err and "[run 7/7] ce supervised" in err
    assert "[run] 7/7 done in " in err
    assert len(calls) == 7 and not any(verbose for *_, verbose in calls)
    chain.main([*argv, "--verbose"])
    err = capsys.readouterr().err
    assert err.count("done before: ") == 7 and "(7 reused)" in err and len(calls) == 7
