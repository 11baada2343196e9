"""A full disk (or quota, or file-size limit) while writing a checkpoint or the disk cache:
one line naming the path and the space it needs, the previous file kept, nothing
half-written left; a killed writer's temporary file removed at the next start."""

from __future__ import annotations

import errno
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections import namedtuple
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from lightning.pytorch import Callback
from PIL import Image

from ncl_lightning.checkpoints.io import AtomicCheckpointIO, atomic_save, tensor_bytes
from ncl_lightning.data.folder import ImageListDataset, scan_class_folders
from ncl_lightning.data.memory import decode_images
from ncl_lightning.foundation.disk import format_bytes, host_tag
from ncl_lightning.foundation.errors import DiskFullError
from ncl_lightning.runtime.cli import main
from ncl_lightning.runtime.errors import error_message as user_error_message
from tests.conftest import ROOT
from tests.resume_helpers import digits_run_config
from tests.runtime.test_signals import digits_config, start, wait_for

Usage = namedtuple("Usage", "total used free")
REAL_WRITE = os.write


def enospc_on(marker: str, code: int = errno.ENOSPC):
    """An ``os.write`` that fails with ``code`` for files whose name holds ``marker``
    (what the kernel returns on a full disk), after writing the first byte."""

    def write(fd: int, data) -> int:
        name = os.readlink(f"/proc/self/fd/{fd}")
        if marker in os.path.basename(name):
            if os.fstat(fd).st_size > 0:
                raise OSError(code, os.strerror(code))
            return REAL_WRITE(fd, bytes(data)[:1])
        return REAL_WRITE(fd, data)

    return write


def test_write_error_keeps_previous_and_names_the_space(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "last.ckpt"
    atomic_save({"version": 1, "w": torch.ones(1000)}, path)
    efbig = "file too large for this process or file system"
    for code, words in [(errno.ENOSPC, "no space left on the device"),
                        (errno.EDQUOT, "disk quota exceeded"), (errno.EFBIG, efbig)]:  # fmt: skip
        monkeypatch.setattr(os, "write", enospc_on(".tmp-", code))
        with pytest.raises(DiskFullError) as info:
            AtomicCheckpointIO().save_checkpoint({"version": 2, "w": torch.zeros(50_000)}, path)
        monkeypatch.setattr(os, "write", REAL_WRITE)
        message = user_error_message(info.value)
        assert message == str(info.value) and "\n" not in message
        assert message.startswith(f"cannot write {path}: {words} (it needs about 195.3 KiB, ")
        assert f" free in {tmp_path}); " in message and message.endswith("last.ckpt is kept")
        assert info.value.errno == code and isinstance(info.value, OSError)
        assert torch.load(path, weights_only=True)["version"] == 1
        assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]


def test_free_space_is_checked_before_writing(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "sub" / "model.ckpt"
    state = {"w": torch.zeros(1 << 20)}  # 4 MiB
    assert tensor_bytes(state) == 4 << 20
    assert tensor_bytes({"a": state["w"], "b": [state["w"][:10]]}) == 4 << 20  # shared once
    monkeypatch.setattr(shutil, "disk_usage", lambda _: Usage(10 << 30, 0, 1 << 20))
    monkeypatch.setattr(os, "write", enospc_on("", errno.EIO))  # nothing may be written
    with pytest.raises(DiskFullError, match=r"it needs about 4\.0 MiB, 1\.0 MiB free in "):
        atomic_save(state, path)
    assert list(path.parent.iterdir()) == []
    monkeypatch.setattr(os, "write", REAL_WRITE)
    monkeypatch.setattr(shutil, "disk_usage", lambda _: Usage(10 << 30, 0, 5 << 20))
    atomic_save(state, path)
    assert torch.equal(torch.load(path, weights_only=True)["w"], state["w"])


def test_other_errors_pass_through_and_leave_no_file(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "last.ckpt"
    monkeypatch.setattr(os, "write", enospc_on(".tmp-", errno.EIO))
    with pytest.raises(OSError) as info:
        atomic_save({"w": torch.ones(10)}, path)
    assert not isinstance(info.value, DiskFullError)
    assert list(tmp_path.iterdir()) == []


def test_no_room_for_the_file_entry(tmp_path: Path, monkeypatch) -> None:
    """ENOSPC when creating the file (no free inode): the same one error."""
    real_open = os.open

    def no_inode(path, flags, *args):
        if ".tmp-" in str(path):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", no_inode)
    with pytest.raises(DiskFullError, match=r"no space left on the device \(it needs about 40 "):
        atomic_save({"w": torch.ones(10)}, tmp_path / "last.ckpt")
    assert list(tmp_path.iterdir()) == []


def dead_pid() -> int:
    """The pid of a process that has ended."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return int(done.stdout)


def test_stale_temporary_files_of_dead_writers_are_removed(tmp_path: Path) -> None:
    dead = dead_pid()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stale = tmp_path / f".last.ckpt.tmp-{dead}"
        mine = tmp_path / f".last.ckpt.tmp-{live.pid}"
        other = tmp_path / "notes.tmp-1"  # not a temporary file of ours
        for p in (stale, mine, other):
            p.write_bytes(b"half")
        AtomicCheckpointIO().save_checkpoint({"w": torch.ones(3)}, tmp_path / "last.ckpt")
        assert not stale.exists() and mine.exists() and other.exists()
        assert (tmp_path / "last.ckpt").exists()
    finally:
        live.kill()
        live.wait()


def short_fit_config(run: Path) -> dict:
    """Two epochs of two batches on the digits, ``last.ckpt`` after each, CSV logs."""
    config = digits_run_config(run, max_epochs=2)
    config["trainer"]["callbacks"] = config["trainer"]["callbacks"][:1]  # ModelCheckpoint
    config["trainer"]["limit_train_batches"] = 2
    config["trainer"]["limit_val_batches"] = 0
    return config


@pytest.mark.slow
def test_full_disk_inside_fit_is_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    """ENOSPC on the second epoch's checkpoint: one ``ncl-cli: error:`` line, no traceback,
    the first epoch's ``last.ckpt`` kept, no temporary file left; the temporary file a
    killed writer left in the folder is removed when the run starts, a live one's kept."""
    run, checkpoints = tmp_path / "run", tmp_path / "checkpoints"
    config = short_fit_config(run)
    config["trainer"]["callbacks"][0]["init_args"]["dirpath"] = str(checkpoints)
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    checkpoints.mkdir()
    stale = checkpoints / f".last.ckpt.tmp-{dead_pid()}"
    live = checkpoints / f".last.ckpt.tmp-{os.getppid()}"
    stale.write_bytes(b"half")
    live.write_bytes(b"half")

    def write(fd: int, data) -> int:
        if (checkpoints / "last.ckpt").exists() and ".tmp-" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return REAL_WRITE(fd, data)

    monkeypatch.setattr(os, "write", write)
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(tmp_path / "run.yaml")])
    assert exit_info.value.code == 1  # a fault of the machine, not of the input
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("ncl-cli: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    target = checkpoints / "epoch=1-step=4.ckpt"
    assert lines[0].startswith(f"ncl-cli: error: cannot write {target}: no space left on")
    assert " free in " in lines[0] and lines[0].endswith("; nothing was written")
    assert torch.load(checkpoints / "last.ckpt", weights_only=True)["global_step"] == 2
    names = sorted(p.name for p in checkpoints.iterdir())
    assert names == [live.name, "epoch=0-step=2.ckpt", "last.ckpt"]


# ------------------------------------------------------------------ the disk cache
def image_folder(root: Path, n: int = 6) -> tuple[ImageListDataset, list[tuple[str, int]]]:
    """``root/train/{a,b}/<i>.png``: ``n`` small random images per class."""
    rng = np.random.default_rng(0)
    for name in ("a", "b"):
        (root / "train" / name).mkdir(parents=True)
        for i in range(n):
            pixels = rng.integers(0, 256, (20 + i, 24, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / "train" / name / f"{i}.png")
    samples = scan_class_folders(root / "train", ["a", "b"])
    return ImageListDataset(samples, ["a", "b"]), samples


class Counting(torch.utils.data.Dataset):
    def __init__(self, dataset: ImageListDataset) -> None:
        self.dataset, self.calls = dataset, 0

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int):
        self.calls += 1
        return self.dataset[index]


def test_cache_that_does_not_fit_is_refused_before_decoding(tmp_path: Path, monkeypatch) -> None:
    dataset, samples = image_folder(tmp_path / "images")
    counting, cache_dir = Counting(dataset), tmp_path / "cache"
    size = 128 + 12 * 3 * 64 * 64  # header + rows
    monkeypatch.setattr(shutil, "disk_usage", lambda _: Usage(1 << 30, 0, 100_000))
    with pytest.raises(DiskFullError) as info:
        decode_images(counting, samples, 64, "disk", cache_dir)
    (path,) = [Path(info.value.path)]
    assert path.parent == cache_dir and path.suffix == ".npy"
    assert str(info.value) == (
        f"cannot write {path}: no space left on the device (it needs {format_bytes(size)}, "
        f"97.7 KiB free in {cache_dir}); free space there, or set data.init_args.cache_dir to "
        "another disk, or data.init_args.cache: memory (or none); nothing was written"
    )
    assert counting.calls == 0 and list(cache_dir.iterdir()) == []


def test_cache_write_error_leaves_nothing_then_a_rerun_works(tmp_path: Path, monkeypatch) -> None:
    dataset, samples = image_folder(tmp_path / "images")
    cache_dir = tmp_path / "cache"
    monkeypatch.setattr(os, "write", enospc_on(".partial"))
    with pytest.raises(DiskFullError, match=r"no space left on the device \(it needs 144\.1 KiB"):
        decode_images(dataset, samples, 64, "disk", cache_dir)
    assert list(cache_dir.iterdir()) == []
    monkeypatch.setattr(os, "write", REAL_WRITE)
    decoded = decode_images(dataset, samples, 64, "disk", cache_dir)
    memory = decode_images(dataset, samples, 64, "memory")
    assert torch.equal(decoded.images, memory.images)
    assert [p.suffix for p in cache_dir.iterdir()] == [".npy"]


def test_stale_cache_files_are_removed_at_the_next_start(tmp_path: Path) -> None:
    dataset, samples = image_folder(tmp_path / "images", n=1)
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    dead, live_pid, host = dead_pid(), os.getppid(), host_tag()
    names = {
        f"0123abcd.{dead}.partial": False,  # an older name, of this host
        f"0123abcd.{host}-{dead}.partial": False,
        f"0123abcd.skipped.{host}-{dead}.partial": False,
        f"0123abcd.{host}-{live_pid}.partial": True,  # a live writer's
        "0123abcd.elsewhere-17.partial": True,  # another host's, written just now
        "4567cdef.elsewhere-17.partial": False,  # another host's, untouched for 2 hours
        "notes.partial": True,
    }
    for name in names:
        (cache_dir / name).write_bytes(b"half")
    old = time.time() - 7200
    os.utime(cache_dir / "4567cdef.elsewhere-17.partial", (old, old))
    decode_images(dataset, samples, 8, "disk", cache_dir)
    left = {p.name for p in cache_dir.iterdir() if p.suffix == ".partial"}
    assert left == {name for name, kept in names.items() if kept}


# Two real processes' worth of checks in one process (one interpreter start, one torch
# import), in this order:
# 1. real ENOSPC from the kernel on a 1 MiB tmpfs (root only: skipped without the mount): a
#    checkpoint whose tensors fit but whose file does not, and a cache whose free-space
#    check is fooled (the space taken meanwhile): the write or the reservation fails, never
#    a SIGBUS;
# 2. a writer limited to 64 KiB per file (RLIMIT_FSIZE; Python ignores SIGXFSZ, so the write
#    fails with EFBIG as on a file system's size limit): the process ends on that error.
REAL_PROCESS = textwrap.dedent(
    """
    import resource, shutil, sys, torch
    from collections import namedtuple
    from pathlib import Path
    from ncl_lightning.checkpoints.io import atomic_save
    fs, work, limited = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    if fs:
        from ncl_lightning.data.memory import decode_images
        from ncl_lightning.foundation.errors import DiskFullError
        from tests.foundation.test_disk_full import image_folder
        fs = Path(fs)
        atomic_save({"step": 1}, fs / "last.ckpt")
        try:
            atomic_save({"w": [torch.zeros(100) for _ in range(2500)]}, fs / "last.ckpt")
        except DiskFullError as err:
            print("ckpt:", err)
        dataset, samples = image_folder(work)
        real_usage = shutil.disk_usage
        shutil.disk_usage = lambda _: namedtuple("U", "total used free")(1 << 40, 0, 1 << 40)
        try:
            decode_images(dataset, samples, 256, "disk", fs / "cache")
        except DiskFullError as err:
            print("cache:", err)
        shutil.disk_usage = real_usage
        sys.stdout.flush()
    atomic_save({"version": 1}, limited)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, resource.RLIM_INFINITY))
    atomic_save({"version": 2, "w": torch.zeros(1 << 16)}, limited)
    """
)
RealProcess = namedtuple("RealProcess", "done fs limited")


@pytest.fixture(scope="module")
def real_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealProcess]:
    """The one process of the two checks above: its result, the tmpfs (``None`` when it
    cannot be mounted) and the size-limited writer's checkpoint (alone in its folder)."""
    root = tmp_path_factory.mktemp("real_process")
    fs, limited = root / "fs", root / "limited" / "last.ckpt"
    fs.mkdir()
    limited.parent.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(fs)],
                             capture_output=True, check=False).returncode == 0  # fmt: skip
    try:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        args = [str(fs) if mounted else "", str(root / "img"), str(limited)]
        done = subprocess.run([sys.executable, "-c", REAL_PROCESS, *args], env=env,
                              capture_output=True, text=True, timeout=300)  # fmt: skip
        yield RealProcess(done, fs if mounted else None, limited)
    finally:
        if mounted:
            subprocess.run(["umount", str(fs)], check=False)


@pytest.mark.xdist_group("disk_full_real_process")  # one worker: one process for both
def test_real_full_disk_on_a_small_tmpfs(real_process: RealProcess) -> None:
    done, fs = real_process.done, real_process.fs
    if fs is None:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    # a SIGBUS would be -7; the one error is the size-limited writer's, which ran after
    assert done.returncode == 1 and done.stderr.count("Traceback") == 1, done.stderr[-3000:]
    assert str(real_process.limited) in done.stderr.strip().splitlines()[-1]
    ckpt, cache = done.stdout.strip().splitlines()
    assert ckpt.startswith(f"ckpt: cannot write {fs / 'last.ckpt'}: no space left on the "
                           "device (it needs more than ")  # fmt: skip
    assert ckpt.endswith("the previous last.ckpt is kept")
    assert cache.startswith(f"cache: cannot write {fs / 'cache'}/")
    assert ": no space left on the device (it needs 2.3 MiB, 1.0 TiB free in " in cache
    assert torch.load(fs / "last.ckpt", weights_only=True) == {"step": 1}
    assert sorted(p.name for p in fs.rglob("*")) == ["cache", "last.ckpt"]


@pytest.mark.xdist_group("disk_full_real_process")
def test_file_size_limit_in_a_real_process(real_process: RealProcess) -> None:
    done, path = real_process.done, real_process.limited
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"ncl_lightning.foundation.errors.DiskFullError: cannot write {path}: "
                           "file too large")  # fmt: skip
    assert "(it needs about 256.0 KiB, " in last
    # without our writer this is a RuntimeError with the OSError only in its context
    assert done.stderr.count("Traceback") == 1, done.stderr
    assert torch.load(path, weights_only=True) == {"version": 1}
    assert sorted(p.name for p in path.parent.iterdir()) == ["last.ckpt"]


class LimitFileSize(Callback):
    """From epoch ``epoch`` on, no file of this process may grow past ``limit`` bytes
    (``RLIMIT_FSIZE``: writes fail with EFBIG, as on a file system's size limit)."""

    def __init__(self, epoch: int = 1, limit: int = 1 << 14) -> None:
        self.epoch, self.limit = epoch, limit

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        if trainer.current_epoch == self.epoch:
            resource.setrlimit(resource.RLIMIT_FSIZE, (self.limit, resource.RLIM_INFINITY))


@pytest.mark.slow
def test_preempted_run_whose_save_does_not_fit(tmp_path: Path) -> None:
    """SIGTERM in epoch 1 whose checkpoint cannot be written: still exit 143, one line
    saying it was not saved and which checkpoint (epoch 0's, kept) resumes the run."""
    run, marker = tmp_path / "run", tmp_path / "marker"
    config = digits_config(run, str(marker), pause=2.0)  # batch 3 of 8 on: 10 s to be stopped
    config["trainer"]["limit_train_batches"] = 8
    config["trainer"]["callbacks"].append(
        {"class_path": "tests.foundation.test_disk_full.LimitFileSize"}
    )
    proc = start(config, tmp_path / "run.yaml")
    wait_for(marker, proc)  # in the second epoch, under the limit
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 143, out[-3000:]
    last = run / "digits" / "version_0" / "checkpoints" / "last.ckpt"
    step = torch.load(last, weights_only=True)["global_step"]
    assert step == 8  # epoch 0's, kept
    lines = [line for line in out.splitlines() if line.startswith("ncl-cli:")]
    assert len(lines) == 1 and "Traceback" not in out, out[-3000:]
    found = re.match(r"ncl-cli: stopped by SIGTERM at step (\d+) \(epoch 2\); ", lines[0])
    assert found and step < int(found.group(1)) < 2 * step, lines[0]  # mid-epoch
    assert lines[0][found.end() :].startswith(
        f"not saved: cannot write {last}: file too large for this process or file system "
        "(it needs about "
    )
    assert (
        f"the previous last.ckpt is kept; the last checkpoint is {last} (step {step}); "
        "resume with: " in lines[0]
    )
    assert lines[0].endswith(" --run_id version_0 --ckpt_path last")
    assert not [p for p in last.parent.iterdir() if ".tmp-" in p.name]
