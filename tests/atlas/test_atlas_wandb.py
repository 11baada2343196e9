"""``FeatureAtlas`` under a W&B logger (offline): an HTML panel and an artifact of the site.

``trainer.test`` of a small NCL on the bundled digits, with the project's ``WandbLogger``
and with Lightning's own (through :func:`ncl_lightning.runtime.loggers.log_site`). The
offline run's ``.wandb`` file is read back (:mod:`tests.helpers.wandb_run`): the history
holds ``test/atlas`` as an ``html-file`` whose page (in the run's ``files/media/html``)
embeds the atlas document with the strips of its highest-EA live dimensions inlined as data
URLs (the bytes of the files of the site); the run logged an artifact of type ``atlas``
whose manifest lists ``index.html`` and every strip, with the MD5 of the files written.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from pathlib import Path

import lightning as L
import pytest
import torch
import wandb
from lightning.pytorch.loggers import WandbLogger as LightningWandbLogger
from wandb.proto import wandb_internal_pb2 as pb

from ncl_lightning.atlas import FeatureAtlas, read_atlas
from ncl_lightning.atlas.callback import PANEL_DIMS
from ncl_lightning.data import DigitsDataModule
from ncl_lightning.methods import NCL
from ncl_lightning.nn import SmallCNN
from ncl_lightning.runtime.loggers import WandbLogger
from tests.helpers.wandb_run import offline_runs, read_records, read_run

NUM_FEATURES = 192  # more live dimensions than the panel inlines (PANEL_DIMS)


@pytest.fixture(autouse=True)
def _offline_wandb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Offline W&B with its staging and cache folders in ``tmp_path``; no run left open."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "wandb-data"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))
    wandb.finish()
    yield
    wandb.finish()


def _md5(data: bytes) -> str:
    """W&B's manifest digest: base64 of the MD5."""
    return base64.b64encode(hashlib.md5(data).digest()).decode()


def _test_with(logger: L.pytorch.loggers.Logger, out: Path) -> FeatureAtlas:
    torch.manual_seed(0)
    model = NCL(
        backbone=SmallCNN(in_channels=1, width=8, out_dim=32),
        proj_hidden_dim=64,
        proj_output_dim=NUM_FEATURES,
        num_classes=10,
        batch_size=128,
        warmup_epochs=0,
    )
    atlas = FeatureAtlas(out=str(out), sepin=False)
    trainer = L.Trainer(
        accelerator="cpu", logger=logger, callbacks=[atlas], enable_progress_bar=False,
        enable_model_summary=False,
    )  # fmt: skip
    trainer.test(model, DigitsDataModule(batch_size=128), verbose=False)
    wandb.finish()
    return atlas


@pytest.mark.parametrize("logger_class", [WandbLogger, LightningWandbLogger])
def test_atlas_is_an_html_panel_and_an_artifact(
    tmp_path: Path, logger_class: type[LightningWandbLogger]
) -> None:
    out = tmp_path / "site"  # not the run's folder, <save_dir>/atlas/<run id> for ours
    atlas = _test_with(logger_class(save_dir=str(tmp_path), offline=True, project="atlas"), out)
    assert atlas.index == out / "index.html"
    site = {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    (folder,) = offline_runs(tmp_path)

    # the HTML panel: one page, no files beside it, the strips inlined
    (row,) = read_run(folder).rows_with("test/atlas")
    panel = row["test/atlas"]
    assert panel["_type"] == "html-file" and panel["path"].startswith("media/html/test/atlas")
    (model,) = read_atlas((folder / "files" / panel["path"]).read_text())["models"]
    dims, ext = model["dims"], model["images"]["ext"]
    live = [j for j, top in enumerate(dims["top"]) if top]
    assert len(live) > PANEL_DIMS  # the panel carries a subset
    by_ea = sorted(live, key=lambda j: -dims["ea"][j])[:PANEL_DIMS]
    inline = model["images"]["inline"]
    assert sorted(map(int, inline)) == sorted(by_ea)
    prefix = f"data:image/{ext};base64,"
    for j, url in inline.items():
        assert url.startswith(prefix)
        assert base64.b64decode(url[len(prefix) :]) == site[f"img/m0/{j}.{ext}"]

    # the artifact: the whole site, as written
    records = [r for r in read_records(next(folder.glob("run-*.wandb"))) if r.HasField("artifact")]
    (artifact,) = [r.artifact for r in records if r.artifact.type == "atlas"]
    assert isinstance(artifact, pb.ArtifactRecord) and artifact.name.startswith("atlas-")
    manifest = {entry.path: entry.digest for entry in artifact.manifest.contents}
    assert "index.html" in manifest and len(manifest) == len(live) + 1
    assert manifest == {path: _md5(data) for path, data in site.items()}
    staged = {Path(entry.local_path).parent for entry in artifact.manifest.contents}
    assert staged == {tmp_path / "wandb-data" / "artifacts" / "staging"}  # not in $HOME
