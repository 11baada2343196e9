"""Sparse-coding study through ``ncl-cli`` (every config and overlay) and its script."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch

from ncl_lightning.metrics.functional.dictionary import dictionary_recovery
from ncl_lightning.runtime.cli import cli_main
from ncl_lightning.studies import landscape
from tests.conftest import ROOT

GROUND_TRUTH = ROOT / "configs" / "ground_truth"
SPARSE_CODING = sorted(GROUND_TRUTH.glob("sparse_coding_*.yaml"))


def _fit(config_args: list[str], tmp_path: Path, *extra: str):
    args = [
        "fit",
        *config_args,
        "--trainer.max_epochs", "2",
        "--trainer.check_val_every_n_epoch", "1",
        "--trainer.default_root_dir", str(tmp_path),
        "--trainer.logger.init_args.save_dir", str(tmp_path),
        *extra,
    ]  # fmt: skip
    return cli_main(args)


@pytest.mark.slow
@pytest.mark.parametrize("config", SPARSE_CODING, ids=[c.stem for c in SPARSE_CODING])
def test_sparse_coding_config_short_run(config: Path, tmp_path: Path) -> None:
    cli = _fit(["--config", str(config)], tmp_path)
    metrics = cli.trainer.callback_metrics
    assert cli.trainer.global_step == 20  # n = 1000, batch 100, 2 epochs
    assert {"train/objective", "train/dictionary/min", "val/dictionary/median"} <= set(metrics)
    expected = dictionary_recovery(cli.model.backbone.dictionary_weight, cli.datamodule.dictionary)
    assert metrics["val/dictionary/min"].item() == pytest.approx(expected["min"].item())


def _predictor_linear_layers(model: torch.nn.Module) -> int:
    return sum(isinstance(m, torch.nn.Linear) for m in model.predictor.modules())


@pytest.mark.slow
def test_simsiam_config_is_the_paper_architecture(tmp_path: Path) -> None:
    """Pokle et al.'s SimSiam (models/simsiam.py): encoder, m x m projector layer with BN
    and SReLU, one linear predictor; the paper's Bernoulli latents (Sec. 5.2.2)."""
    cli = _fit(["--config", str(GROUND_TRUTH / "sparse_coding_simsiam.yaml")], tmp_path)
    backbone = cli.model.backbone
    assert backbone.second is not None and backbone.second[0].weight.shape == (50, 50)
    assert isinstance(backbone.second[1], torch.nn.BatchNorm1d)
    assert _predictor_linear_layers(cli.model) == 1
    assert cli.datamodule.model.support == "bernoulli"
    counts = (cli.datamodule.train_latents != 0).sum(dim=1)
    assert counts.min() >= 1 and counts.max() >= 3  # not the code's fixed 2 at Pr 0.1


@pytest.mark.slow
def test_overlays_strip_the_projector_add_the_predictor_and_the_warm_start(
    tmp_path: Path,
) -> None:
    overlays = [
        "encoder_only.yaml",
        "predictor.yaml",
        "warm_start.yaml",
        "fixed_count_latents.yaml",
    ]
    args = ["--config", str(GROUND_TRUTH / "sparse_coding_simsiam.yaml")]
    args += [a for o in overlays for a in ("--config", str(GROUND_TRUTH / "overlays" / o))]
    cli = _fit(args, tmp_path, "--trainer.callbacks.init_args.seed", "7")
    assert cli.model.backbone.second is None and _predictor_linear_layers(cli.model) == 1
    assert cli.datamodule.model.support == "fixed_count"
    assert ((cli.datamodule.train_latents != 0).sum(dim=1) == 2).all()  # gen_z at Pr 0.1
    warm = [c for c in cli.trainer.callbacks if type(c).__name__ == "WarmStart"]
    assert len(warm) == 1 and warm[0].seed == 7 and warm[0].atoms is not None
    assert warm[0].c == 1.0  # Pokle et al. Sec. 5.2.2, Figs. 4-6
    only = _fit(args[:4], tmp_path / "encoder_only")
    assert only.model.backbone.second is None and _predictor_linear_layers(only.model) == 0


@pytest.mark.slow
def test_fig7_overlay_starts_at_c2_and_keeps_unit_rows(tmp_path: Path) -> None:
    """Pokle et al. Fig. 7's start and normalisation on the encoder-only SimSiam: WarmStart
    with c = 2, and after training every row of W has unit norm."""
    overlays = ["encoder_only.yaml", "warm_start_row_norm.yaml"]
    args = ["--config", str(GROUND_TRUTH / "sparse_coding_simsiam.yaml")]
    args += [a for o in overlays for a in ("--config", str(GROUND_TRUTH / "overlays" / o))]
    cli = _fit(args, tmp_path, "--trainer.callbacks.init_args.seed", "3")
    warm = [c for c in cli.trainer.callbacks if type(c).__name__ == "WarmStart"]
    assert len(warm) == 1 and warm[0].c == 2.0 and warm[0].seed == 3
    norms = cli.model.backbone.dictionary_weight.detach().norm(dim=1)
    assert torch.allclose(norms, torch.ones_like(norms), atol=1e-5)
    assert _predictor_linear_layers(cli.model) == 0  # Fig. 7: no predictor


@pytest.mark.slow
def test_landscape_study_writes_table_and_curves_and_resumes(
    tmp_path: Path, capfd: pytest.CaptureFixture, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "study"
    variants = ["SimCLR", "SimSiam, encoder only + predictor + warm start"]
    short = ["--trainer.max_epochs=3"]
    caplog.set_level(logging.INFO, logger="lightning.pytorch")  # banners on unless quieted
    records = landscape.run_study(out, variants, sparsities=[0.2], seeds=2, workers=1, extra=short)
    err = capfd.readouterr().err
    assert "[run 1/4] landscape SimCLR sparsity=0.2 seed=0 | elapsed 0.0s | ETA ?" in err
    assert "[run 4/4] done in " in err and "[run] 4/4 done in " in err
    assert err.count("| ETA ") == 8  # a start and an end line per run
    for banner in ("GPU available", "LOCAL_RANK", "`Trainer.fit` stopped", "Seed set"):
        assert banner not in err + caplog.text
    assert logging.getLogger("lightning.pytorch").level == logging.INFO  # restored
    assert len(records) == 4 and {r["seed"] for r in records} == {0, 1}
    assert all(r["steps"] == 30 and len(r["curves"]["step"]) == 3 for r in records)
    assert all(0.0 <= r["min"] <= r["median"] <= r["max"] <= 1.0 for r in records)
    # Different seeds draw different data and initialisations.
    assert records[0]["min"] != records[1]["min"]
    table = (out / "table.md").read_text()
    assert "| SimCLR | 0.2 | 2 |" in table
    assert "| 0.94 ± 0.004 / 0.93 ± 0.003 / 0.90 ± 0.01 |" in table  # Pokle et al. Table 1
    for png in ("min_max_cosine.png", "loss.png"):
        assert (out / png).stat().st_size > 1000
    stamp = (landscape.run_dir(out, "SimCLR", 0.2, 0) / "result.json").stat().st_mtime_ns
    again = landscape.run_study(out, variants, sparsities=[0.2], seeds=2, workers=1, extra=short)
    err = capfd.readouterr().err
    assert "[run 4/4] reused: landscape SimSiam" in err and "(4 reused)" in err
    assert [r["min"] for r in again] == [r["min"] for r in records]
    assert (landscape.run_dir(out, "SimCLR", 0.2, 0) / "result.json").stat().st_mtime_ns == stamp
    assert json.loads((out / "results.json").read_text())[0]["variant"] == "SimCLR"


def test_study_variants_name_existing_overlays_and_honest_labels() -> None:
    for name, variant in landscape.VARIANTS.items():
        assert all(Path(arg).is_file() for arg in variant.config_args()[1::2]), name
        stripped = "encoder_only.yaml" in variant.overlays
        assert stripped == ("encoder only" in name), name  # no projector/predictor: said
        assert ("fixed_count_latents.yaml" in variant.overlays) == ("fixed-count" in name), name
        warm = [o for o in variant.overlays if o.startswith("warm_start")]
        assert bool(warm) == ("warm start" in name), name
        assert ("warm_start_row_norm.yaml" in warm) == ("c = 2 + row norm" in name), name
    # Pokle et al. Table 1, all three columns for both models and every Pr(z_i = ±1).
    assert set(landscape.PAPER) == {
        (v, s) for v in ("SimCLR", landscape.PAPER_SIMSIAM) for s in landscape.SPARSITIES
    }
    assert (
        landscape.paper_cell(landscape.PAPER_SIMSIAM, 0.3)
        == "0.678 ± 0.2 / 0.45 ± 0.01 / 0.37 ± 0.03"
    )
    assert landscape.paper_cell("SimCLR", 0.1) == "0.94 ± 0.005 / 0.92 ± 0.004 / 0.83 ± 0.16"
    assert landscape.paper_cell(landscape.ENCODER_ONLY, 0.1) == ""


def test_study_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown variant"):
        landscape.run_study(tmp_path, ["SimCLR", "MoCo"])
    with pytest.raises(ValueError, match="seeds must be an integer >= 1"):
        landscape.run_study(tmp_path, ["SimCLR"], seeds=0)
    with pytest.raises(ValueError, match="sparsity must be in"):
        landscape.run_study(tmp_path, ["SimCLR"], sparsities=[0.0])


@pytest.mark.slow
def test_simclr_recovers_the_dictionary(tmp_path: Path) -> None:
    """The full 2000-step SimCLR config recovers every atom (median > 0.9, paper 0.92-0.93)."""
    args = [
        "fit", "--config", str(GROUND_TRUTH / "sparse_coding_simclr.yaml"),
        "--data.init_args.nonzero_prob", "0.2",
        "--trainer.default_root_dir", str(tmp_path),
        "--trainer.logger.init_args.save_dir", str(tmp_path),
    ]  # fmt: skip
    cli = cli_main(args)
    scores = dictionary_recovery(cli.model.backbone.dictionary_weight, cli.datamodule.dictionary)
    assert scores["median"] > 0.9
