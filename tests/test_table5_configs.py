"""The NCL paper's Table 5 runs (App. D.1, D.2): SCL, SCL + reg and NCL differ only in what the
table varies, and the probe overlay gives the SCL release's 100-epoch probe.

The configs are resolved by the parser of ``ncl-cli`` (:mod:`tests.helpers.paper_configs`);
``tests/test_paper_configs.py`` checks each value against ``docs/fidelity.md``, this module
checks the three rows against each other and the overlay on top of its base.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.paper_configs import CHECKPOINT, CONFIGS, Resolver, leaves

ROWS = {
    "SCL": "cifar10_spectral_cl",
    "SCL + reg": "cifar10_spectral_cl_l1",
    "NCL": "cifar10_spectral_ncl",
}
# What Table 5 varies between its rows, and the run's name and W&B kind.
VARIED = (
    "model.class_path",
    "model.init_args.nonneg",
    "model.init_args.loss.class_path",
    "model.init_args.loss.init_args.l1_weight",
    "trainer.logger.init_args.name",
    "trainer.logger.init_args.job_type",
)


@pytest.fixture(scope="module")
def resolver() -> Resolver:
    return Resolver(CONFIGS / "cifar10_ncl.yaml")


def _flat(resolver: Resolver, *args: str) -> dict[str, Any]:
    """Dotted leaves of the resolved ``fit`` section (without ``config``, the file list)."""
    resolved = resolver.parser.parse_args(["fit", *args])["fit"].clone().as_dict()
    return {k: v for k, v in leaves(resolved).items() if k != "config"}


def test_the_three_rows_differ_only_in_what_table5_varies(resolver: Resolver) -> None:
    rows = {row: _flat(resolver, "--config", str(CONFIGS / f"{name}.yaml"))
            for row, name in ROWS.items()}  # fmt: skip
    scl, reg, ncl = rows["SCL"], rows["SCL + reg"], rows["NCL"]
    for other in (reg, ncl):
        differ = {k for k in scl.keys() | other.keys() if scl.get(k) != other.get(k)}
        assert differ <= set(VARIED), sorted(differ - set(VARIED))
    assert (scl["model.class_path"], ncl["model.class_path"]) == (
        "ncl_lightning.methods.CL", "ncl_lightning.methods.NCL",
    )  # fmt: skip
    assert ncl["model.init_args.nonneg"] == "rep_relu"
    assert scl["model.init_args.loss.class_path"].endswith("SpectralContrastiveLoss")
    assert reg["model.init_args.loss.class_path"].endswith("SpectralL1Loss")
    assert reg["model.init_args.loss.init_args.l1_weight"] > 0
    # the setting of App. D.1 and the SCL release, shared by all three
    for row in rows.values():
        assert row["model.init_args.loss.init_args.normalize"] == "ball"
        assert row["model.init_args.loss.init_args.mu"] == 1.0
        assert row["model.init_args.optimizer.class_path"] == "torch.optim.SGD"
        assert row["model.init_args.optimizer.init_args.weight_decay"] == 1e-4
        assert (row["trainer.max_epochs"], row["data.init_args.batch_size"]) == (200, 256)


@pytest.mark.parametrize("space", ["h", "z"])
def test_the_probe_overlay_is_the_scl_release_probe(resolver: Resolver, space: str) -> None:
    probe = _flat(
        resolver,
        "--config", str(CONFIGS / "eval" / "cifar10_linear.yaml"),
        "--config", str(CONFIGS / "eval" / "overlays" / "scl_linear.yaml"),
        "--model.init_args.checkpoint", CHECKPOINT,
        "--model.init_args.space", space,
    )  # fmt: skip
    assert probe["model.init_args.space"] == space
    assert probe["trainer.max_epochs"] == 100  # NCL paper App. D.1
    assert probe["model.init_args.optimizer.class_path"] == "torch.optim.SGD"
    sgd = {k.rsplit(".", 1)[-1]: v for k, v in probe.items() if ".optimizer.init_args." in k}
    assert (sgd["lr"], sgd["momentum"], sgd["weight_decay"]) == (30.0, 0.9, 0.0)
    assert "eta" not in sgd and "clip_lr" not in sgd  # nothing of the base's LARS is left
    assert probe["model.init_args.lr_milestones"] == [60, 80]
    assert probe["model.init_args.lr_gamma"] == 0.1
    assert probe["model.init_args.warmup_epochs"] == 0
    assert probe["data.init_args.batch_size"] == 256
