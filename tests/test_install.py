"""The install paths of the README: the tested set (``make install``: both constraints
files) and a torch build of the user's choice (CPU-only, CUDA 12.x) with
``-c constraints.txt`` alone. pip resolves stand-in wheels offline, so the test needs no
registry."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

CONSTRAINTS = ROOT / "constraints.txt"
CUDA13 = ROOT / "constraints-cuda13.txt"
CUDA_BUILD = re.compile(r"^(nvidia-|cuda-|triton$)")


def _pins(path: Path) -> dict[str, str]:
    """Package -> pinned version of a constraints file (every line ``name==version``)."""
    pins = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep and version.strip(), f"{path.name}: {line!r} is not an exact pin"
            pins[name.strip().lower()] = version.strip()
    return pins


def test_the_cuda_13_libraries_are_pinned_apart_from_everything_else() -> None:
    common, cuda = _pins(CONSTRAINTS), _pins(CUDA13)
    assert not set(common) & set(cuda)
    assert [n for n in common if CUDA_BUILD.match(n)] == []  # fits any torch build
    assert all(CUDA_BUILD.match(n) for n in cuda) and "cuda-toolkit" in cuda
    # torch and torchvision without a build tag: 2.14.1 matches 2.14.1+cpu and +cu126.
    assert "+" not in common["torch"] and "+" not in common["torchvision"]
    for name in ("timm", "safetensors", "huggingface_hub"):
        assert name in common  # the rest of the tested set stays in constraints.txt


def test_make_install_uses_both_files_as_ci_did() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "$(STAMP): pyproject.toml constraints.txt constraints-cuda13.txt" in makefile
    assert '-c constraints.txt -c constraints-cuda13.txt -e ".[dev]"' in makefile


def test_the_readme_gives_the_three_torch_builds_and_the_constraints() -> None:
    text = (ROOT / "README.md").read_text()
    install = text.split("## Install", 1)[1].split("\n## ", 1)[0]
    for index in ("https://download.pytorch.org/whl/cpu", "https://download.pytorch.org/whl/cu126"):
        assert f"--index-url {index}" in install
    assert "driver >= 580" in install and "pip install -c constraints.txt ." in install
    assert "constraints-cuda13.txt" in install


def _wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> None:
    """A stand-in wheel: metadata only, which is all that pip's resolver reads."""
    info = f"{name.replace('-', '_')}-{version}.dist-info"
    metadata = [
        "Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
        *(f"Requires-Dist: {r}" for r in requires),
    ]  # fmt: skip
    wheel = "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    with zipfile.ZipFile(folder / f"{name.replace('-', '_')}-{version}-py3-none-any.whl", "w") as z:
        z.writestr(f"{info}/METADATA", "\n".join(metadata) + "\n")
        z.writestr(f"{info}/WHEEL", wheel)
        z.writestr(f"{info}/RECORD", "")


def _resolve(wheels: Path, requirement: str, *constraints: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull  # no site-wide index, find-links or constraints
    command = [
        sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
        "--no-index", "--find-links", str(wheels), "--disable-pip-version-check",
        *(a for c in constraints for a in ("-c", str(c))), requirement,
    ]  # fmt: skip
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("build", "requires"),
    [("cpu", ()), ("cu126", ("cuda-toolkit==12.6.3", "triton==3.8.0"))],
)
def test_a_cpu_or_cuda_12_torch_installs_under_constraints_txt(
    tmp_path: Path, build: str, requires: tuple[str, ...]
) -> None:
    """torch 2.14.1+<build> from PyTorch's index, which needs CUDA 12 libraries: allowed by
    constraints.txt, refused when the CUDA 13 pins are added (why they live apart)."""
    _wheel(tmp_path, "torch", f"2.14.1+{build}", requires)
    _wheel(tmp_path, "cuda-toolkit", "12.6.3")
    _wheel(tmp_path, "triton", "3.8.0")
    done = _resolve(tmp_path, f"torch==2.14.1+{build}", CONSTRAINTS)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"torch-2.14.1+{build}" in done.stdout
    if requires:
        refused = _resolve(tmp_path, f"torch==2.14.1+{build}", CONSTRAINTS, CUDA13)
        assert refused.returncode != 0 and "cuda-toolkit" in refused.stdout + refused.stderr


def test_pypis_cuda_13_torch_installs_under_both_files(tmp_path: Path) -> None:
    cuda = _pins(CUDA13)
    _wheel(tmp_path, "torch", "2.14.1", (f"cuda-toolkit=={cuda['cuda-toolkit']}",))
    _wheel(tmp_path, "cuda-toolkit", cuda["cuda-toolkit"])
    done = _resolve(tmp_path, "torch", CONSTRAINTS, CUDA13)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"cuda-toolkit-{cuda['cuda-toolkit']}" in done.stdout
