"""Installed use: a wheel of the checkout, in a fresh venv, run from a folder outside it.

The wheel is built offline from the installed setuptools (``--no-build-isolation
--no-index``); the fresh venv reuses this environment's torch, Lightning and the rest
through a ``.pth`` line (a plain path: the editable install's own ``.pth`` hook is not run,
so the checkout stays out of reach) and gets only the wheel, ``--no-deps --no-index``. A
second ``.pth`` line writes, at exit, the file of every module the process imported, so
the test can prove that nothing came from the checkout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

# Run at the start of every interpreter of the fresh venv (a `.pth` line that starts with
# `import`): at exit, append the file of each imported module to $NCL_WHEEL_PROBE.
PROBE = (
    "import atexit, os, sys; atexit.register(lambda: open(os.environ['NCL_WHEEL_PROBE'], 'a')"
    ".write(''.join(f'{f}\\n' for m in list(sys.modules.values())"
    " if (f := getattr(m, '__file__', None))))) if 'NCL_WHEEL_PROBE' in os.environ else None\n"
)


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{args} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def _wheel(tmp: Path, env: dict[str, str]) -> Path:
    """Build the wheel from a copy of what the build reads (the checkout stays clean)."""
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "configs", src / "configs", ignore=skip)
    shutil.copytree(ROOT / "ncl_lightning", src / "ncl_lightning", symlinks=True, ignore=skip)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    build = ["wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", "dist"]
    _run([*pip, *build, str(src)], tmp, env)
    (wheel,) = (tmp / "dist").glob("ncl_lightning-*.whl")
    return wheel


def _venv(tmp: Path, wheel: Path, env: dict[str, str]) -> Path:
    """A fresh venv holding only the wheel; the dependencies come from this environment."""
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp, env)
    python = venv / "bin" / "python"
    site = Path(
        _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
             tmp, env).strip()
    )  # fmt: skip
    (site / "reuse_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    (site / "probe_imports.pth").write_text(PROBE)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--python", str(python)]
    _run([*pip, "install", "-q", "--no-deps", "--no-index", str(wheel)], tmp, env)
    return venv


@pytest.mark.slow
def test_wheel_runs_demo_help_and_a_fit_outside_the_checkout(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_"))}
    env.update(PIP_NO_INDEX="1", WANDB_MODE="offline", PYTHONNOUSERSITE="1")
    venv = _venv(tmp_path, _wheel(tmp_path, env), env)
    work = tmp_path / "work"  # outside the checkout: nothing of it on sys.path
    work.mkdir()
    env["NCL_WHEEL_PROBE"] = str(tmp_path / "imported.txt")

    assert "--configs" in _run([str(venv / "bin" / "python"), "-m", "ncl_lightning.demo", "--help"],
                               work, env)  # fmt: skip
    site = next((venv / "lib").glob("python3*/site-packages"))
    config = site / "ncl_lightning" / "configs" / "demo" / "digits_cl.yaml"
    assert config.is_file()  # the configs are package data of the wheel
    fit = [
        str(venv / "bin" / "ncl-cli"), "fit", "--config", str(config),
        "--trainer.max_steps", "1", "--trainer.limit_val_batches", "0",
        "--trainer.enable_progress_bar", "false",
        "--trainer.default_root_dir", "out", "--trainer.logger.init_args.save_dir", "out",
    ]  # fmt: skip
    _run(fit, work, env)

    assert list((work / "out").rglob("*.ckpt")), "the fit wrote no checkpoint"
    assert sorted(p.name for p in work.iterdir()) == ["out"]
    imported = [f for f in (tmp_path / "imported.txt").read_text().split() if Path(f).is_absolute()]
    ours = [f for f in imported if "ncl_lightning" in Path(f).parts]
    assert any(f.endswith("runtime/cli.py") for f in ours) and any("demo.py" in f for f in ours)
    assert all(Path(f).is_relative_to(site) for f in ours), ours
    deps = Path(sys.prefix).resolve()  # this environment (it may sit inside the checkout)
    from_checkout = [
        f for f in imported if ROOT in (r := Path(f).resolve()).parents and deps not in r.parents
    ]
    assert not from_checkout, from_checkout


def _package_data() -> set[str]:
    """Every non-Python file the package needs at run time, as a path inside the package."""
    configs = {f"configs/{p.relative_to(ROOT / 'configs').as_posix()}"
               for p in (ROOT / "configs").rglob("*.yaml")}  # fmt: skip
    package = ROOT / "ncl_lightning"
    other = {p.relative_to(package).as_posix() for pattern in ("data/resources/*.txt",
             "atlas/static/*") for p in package.glob(pattern)}  # fmt: skip
    return configs | other


@pytest.mark.slow
def test_the_sdist_carries_license_citation_constraints_and_builds_the_full_wheel(
    tmp_path: Path,
) -> None:
    """``pip install`` from a source distribution, no make: the sdist has the package data
    (the configs link followed), LICENSE, CITATION.cff and the constraints files, and the
    wheel pip builds from it has every config and resource and the license."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "MANIFEST.in", "LICENSE", "CITATION.cff",
                 "constraints.txt", "constraints-cuda13.txt"):  # fmt: skip
        shutil.copy2(ROOT / name, src / name)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "configs", src / "configs", ignore=skip)
    shutil.copytree(ROOT / "ncl_lightning", src / "ncl_lightning", symlinks=True, ignore=skip)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_"))}
    env.update(PIP_NO_INDEX="1", PIP_CONFIG_FILE=os.devnull)
    hook = f"from setuptools.build_meta import build_sdist; print(build_sdist({str(tmp_path)!r}))"
    name = _run([sys.executable, "-c", hook], src, env).strip().splitlines()[-1]
    sdist = tmp_path / name
    with tarfile.open(sdist) as tar:
        members = {m.name.split("/", 1)[1] for m in tar.getmembers() if m.isfile()}
    top = "LICENSE", "CITATION.cff", "constraints.txt", "constraints-cuda13.txt", "README.md"
    assert set(top) <= members
    assert {f"ncl_lightning/{p}" for p in _package_data()} <= members
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    build = ["wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", "dist"]
    _run([*pip, *build, str(sdist)], tmp_path, env)
    (wheel,) = (tmp_path / "dist").glob("ncl_lightning-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert {f"ncl_lightning/{p}" for p in _package_data()} <= names
    assert any(n.endswith(".dist-info/licenses/LICENSE") or n.endswith(".dist-info/LICENSE")
               for n in names), sorted(n for n in names if "dist-info" in n)  # fmt: skip
