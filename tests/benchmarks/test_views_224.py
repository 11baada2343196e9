"""The ``views-224`` benchmark (CPU data path of ImageNet-100 at 224 px) runs on real
JPEGs and times the torchvision blur as its reference row; no timing is asserted."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image
from torchvision.transforms import v2

from benchmarks import run_benchmark, views_224
from ncl_lightning.data import imagenet_augmentation
from ncl_lightning.data.transforms import SeparableGaussianBlur


def _ops(transform: object) -> list[object]:
    inner = getattr(transform, "transforms", None)
    return [transform] if inner is None else [op for t in inner for op in _ops(t)]


def test_reference_pipeline_has_torchvision_blur() -> None:
    aug = imagenet_augmentation()
    reference = views_224.with_torchvision_blur(aug.build())
    blurs = [op for op in _ops(reference) if isinstance(op, v2.GaussianBlur)]
    assert [type(op) for op in blurs] == [v2.GaussianBlur]
    assert tuple(blurs[0].kernel_size) == (23, 23) and list(blurs[0].sigma) == [0.1, 2.0]
    assert any(isinstance(op, SeparableGaussianBlur) for op in _ops(aug.build()))


@pytest.mark.slow
def test_views_224_runs_on_real_jpegs(
    cifar_subset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NCL_BENCH_DATA", str(cifar_subset))
    paths = views_224.write_jpegs(tmp_path, 3)
    with Image.open(paths[0]) as image:
        assert image.format == "JPEG" and image.size == views_224.SIZE
    monkeypatch.setattr(views_224, "IMAGES", 2)
    rows = run_benchmark("views-224", 1)
    assert len(rows) == 7
    goals = [row for row in rows if row.goal is not None]
    assert len(goals) == 1 and "separable" in goals[0].what
    assert goals[0].goal == pytest.approx(views_224.GOAL_MS / 10)
    assert all(row.seconds > 0 and "ms CPU per" in row.note for row in rows[:6])
    assert "GB allocated per call" in rows[6].note
