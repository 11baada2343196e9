"""Feature atlas generation and page load: ``python -m benchmarks atlas``.

An NCL with the CIFAR ResNet-18 and a 2048-2048 projector (untrained, seed 0: the atlas's
cost depends on the width, not on the weights), 16 images per dimension, on the real
CIFAR-10 subset (``NCL_BENCH_DATA``, as the throughput benchmark): the 932 images of
``val`` and the 3,728 of ``train``, each tested as the test split. Each size runs in a fresh
child process (``spawn``) through ``Trainer.test`` with [`FeatureAtlas`][] (no SEPIN,
one process, loader without workers, images decoded per item: no dataset in memory); the
method's own test step is skipped, so the loop only reads the batches. It reports

(a) profiling: encode + [`FeatureProfile`][ncl_lightning.metrics.FeatureProfile] (the callback's
    ``on_test_epoch_end``) and writing: the strips and ``index.html`` (``on_test_end``), in
    PNG and in WebP (file count, total MB);
(b) memory: the child's RSS high-water mark (``ru_maxrss``) after the model and the data
    module are built (the base) and after each phase; the growth over the base bounds the
    atlas's working memory, which should not grow with the split;
(c) page load of the largest PNG atlas in headless Chromium
    ([`page_load_ms`][benchmarks.atlas_page.page_load_ms]: load event, first cards, JS
    heap), the median of ``repeats`` tabs; skipped with the reason when playwright or
    Chromium is missing.
"""

from __future__ import annotations

import resource
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import lightning as L
import torch

from benchmarks import Timing
from benchmarks.throughput import data_root
from ncl_lightning.atlas import FeatureAtlas
from ncl_lightning.atlas.browser import browser_missing
from ncl_lightning.data import ImageFolderDataModule
from ncl_lightning.foundation.progress import Progress, quiet_lightning
from ncl_lightning.foundation.validation import check_choice
from ncl_lightning.methods import NCL
from ncl_lightning.nn import ResNet, SmallCNN

NUM_FEATURES = 2048
IMAGES_PER_DIM = 16
BATCH_SIZE = 256
SPLITS = ("val", "train")  # 932 and 3,728 images of the subset
FORMATS = ("png", "webp")
BACKBONES = ("resnet18", "smallcnn")


@dataclass(frozen=True)
class Setup:
    """One atlas to generate (what the child process receives)."""

    root: str  # the ImageFolder
    split_dir: str  # its folder tested as the test split
    out: str  # the sites go to <out>/<format>/
    backbone: str = "resnet18"  # one of BACKBONES
    num_features: int = NUM_FEATURES
    images_per_dim: int = IMAGES_PER_DIM
    batch_size: int = BATCH_SIZE
    formats: tuple[str, ...] = FORMATS


def peak_rss_mb() -> float:
    """This process's resident-set high-water mark in MiB (Linux: ``ru_maxrss`` in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def site_size(folder: Path) -> dict[str, float]:
    """Image files under ``folder/img``, their total MiB, and the MiB of ``index.html``."""
    images = [p for p in (folder / "img").rglob("*") if p.is_file()]
    return {
        "files": len(images),
        "images_mb": sum(p.stat().st_size for p in images) / 2**20,
        "html_mb": (folder / "index.html").stat().st_size / 2**20,
    }


class UntestedNCL(NCL):
    """NCL whose test step does nothing: the test loop only reads the batches."""

    def test_step(self, batch: Any, batch_idx: int) -> None:
        return None


class TimedAtlas(FeatureAtlas):
    """[`FeatureAtlas`][] that times its two phases and writes the site once per format.

    Args:
        root: The site of format ``f`` goes to ``<root>/<f>``.
        formats: Image formats written, one after the other, from the same profile.
        **kwargs: [`FeatureAtlas`][] arguments.
    """

    def __init__(self, root: Path, formats: tuple[str, ...], **kwargs: Any) -> None:
        super().__init__(out=str(root / formats[0]), image_format=formats[0], **kwargs)
        self.root, self.formats = root, formats
        self.figures: dict[str, dict[str, float]] = {}

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        start = time.perf_counter()
        super().on_test_epoch_end(trainer, pl_module)
        self.figures["profile"] = {"seconds": time.perf_counter() - start, "rss": peak_rss_mb()}

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        measured = self._measured  # the callback forgets it once written
        for ext in self.formats:
            self._measured, self.image_format, self.out = measured, ext, self.root / ext
            start = time.perf_counter()
            super().on_test_end(trainer, pl_module)
            seconds = time.perf_counter() - start
            self.figures[ext] = {"seconds": seconds, "rss": peak_rss_mb(), **site_size(self.out)}


def _backbone(name: str) -> torch.nn.Module:
    return ResNet(18, "cifar") if name == "resnet18" else SmallCNN(3, 16, 64)


def generate(setup: Setup) -> dict[str, Any]:
    """Generate the atlas of ``setup`` here; return its figures (call in a fresh process).

    Returns:
        ``samples``, ``live`` (dimensions with images), ``base`` (MiB after model and data
        module), and per phase (``profile`` and each format) ``seconds`` and ``rss``
        (high-water MiB), the formats with ``files``, ``images_mb``, ``html_mb``.
    """
    torch.manual_seed(0)
    with quiet_lightning():
        datamodule = ImageFolderDataModule(
            setup.root, test_dir=setup.split_dir, batch_size=setup.batch_size, num_workers=0
        )
        model = UntestedNCL(
            _backbone(setup.backbone), proj_hidden_dim=setup.num_features,
            proj_output_dim=setup.num_features, num_classes=datamodule.num_classes,
            batch_size=setup.batch_size,
        )  # fmt: skip
        atlas = TimedAtlas(
            Path(setup.out), setup.formats, images_per_dim=setup.images_per_dim, sepin=False
        )
        trainer = L.Trainer(
            accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
            enable_progress_bar=False, enable_model_summary=False, callbacks=[atlas],
        )  # fmt: skip
        base = peak_rss_mb()
        trainer.test(model, datamodule=datamodule, verbose=False)
    assert atlas.entry is not None
    live = sum(bool(top) for top in atlas.entry["dims"]["top"])
    return {"samples": atlas.entry["num_samples"], "live": live, "base": base, **atlas.figures}


def generation_rows(figures: dict[str, Any], setup: Setup) -> list[Timing]:
    """The rows of one atlas: profiling, then writing in each format."""
    n, d, base = figures["samples"], setup.num_features, figures["base"]
    model = f"{setup.backbone}, d={d}"
    profile = figures["profile"]
    rows = [
        Timing(
            f"atlas profile: encode + FeatureProfile, {n:,} images ({model})",
            profile["seconds"],
            note=f"RSS: base {base:.0f} MiB (model, data module), peak "
            f"+{profile['rss'] - base:.0f} MiB over it",
        )
    ]
    for ext in setup.formats:
        site = figures[ext]
        rows.append(
            Timing(
                f"atlas write: {ext} strips + index.html, {n:,} images ({model})",
                site["seconds"],
                note=f"{site['files']:.0f} files ({figures['live']} live of {d} dims, "
                f"{setup.images_per_dim} images each), {site['images_mb']:.1f} MiB; "
                f"index.html {site['html_mb']:.2f} MiB; peak RSS +{site['rss'] - base:.0f} MiB",
            )
        )
    return rows


def page_rows(index_html: Path, repeats: int) -> list[Timing]:
    """Page-load rows of ``index_html``, or one row saying why they were skipped."""
    why = browser_missing()
    if why is not None:
        print(f"atlas page load skipped: {why}", file=sys.stderr)
        return [Timing("atlas page load (skipped)", float("nan"), note=f"skipped: {why}")]
    from benchmarks.atlas_page import page_load_ms

    load = page_load_ms(index_html, repeats)
    note = (
        f"median of {repeats} tabs; {load['cards']:.0f} cards in the DOM after load; JS heap "
        f"{load['js_heap_mb']:.1f} MiB; index.html {load['html_mb']:.2f} MiB"
    )
    return [
        Timing(
            "atlas page load: load event (headless Chromium)", load["load_ms"] / 1000, note=note
        ),
        Timing("atlas page load: first cards drawn", load["first_cards_ms"] / 1000),
    ]


def run(
    repeats: int,
    *,
    backbone: str = "resnet18",
    splits: tuple[str, ...] = SPLITS,
    num_features: int = NUM_FEATURES,
    images_per_dim: int = IMAGES_PER_DIM,
    batch_size: int = BATCH_SIZE,
    page: bool = True,
) -> list[Timing]:
    """Generate one atlas per split in a fresh process each; time loading the last one.

    Args:
        repeats: Tabs the page load is measured in (generation runs once per split).
        backbone: ``resnet18`` (CIFAR stem) or ``smallcnn`` (for quick checks).
        splits: Folders of the ImageFolder tested as the test split.
        num_features: Projector width ``d``.
        images_per_dim: Images in a dimension's strip.
        batch_size: Images per batch of the clean loader.
        page: Measure the page load too.

    Returns:
        The rows of [`generation_rows`][] per split, then [`page_rows`][].
    """
    check_choice("backbone", backbone, BACKBONES)
    root, rows = data_root(), []
    steps = Progress(len(splits), "atlas")
    with TemporaryDirectory(prefix="ncl-atlas-bench-") as tmp:
        for split in splits:
            setup = Setup(
                str(root), split, f"{tmp}/{split}", backbone, num_features, images_per_dim,
                batch_size,
            )  # fmt: skip
            pool = ProcessPoolExecutor(1, mp_context=get_context("spawn"))
            with steps.unit(f"{split} ({backbone}, d={num_features})"), pool:
                figures = pool.submit(generate, setup).result()
            rows += generation_rows(figures, setup)
        steps.finish()
        if page:
            rows += page_rows(Path(tmp) / splits[-1] / FORMATS[0] / "index.html", repeats)
    return rows
