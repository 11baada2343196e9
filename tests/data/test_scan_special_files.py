"""A folder scan never blocks, whatever the folder holds: named pipes, devices, sockets,
broken links and link loops are listed as skipped, never opened; a scan is bounded.

Regression: a named pipe ``train/airplane/pipe.png`` was listed as an image and opened
by the loader, which waited forever for a writer (``ncl-cli fit`` hung, no message); a
link loop ``l.png -> l.png`` stopped the scan with a bare ``OSError`` traceback.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ncl_lightning.data.decode import read_image
from ncl_lightning.data.scan import FolderScan, warn_skipped_links
from ncl_lightning.foundation.errors import CorruptImageError, DataError
from tests.conftest import ROOT

EXTENSIONS = (".png", ".jpg")


def images(root: Path, classes: tuple[str, ...] = ("a", "b"), n: int = 6) -> Path:
    """``root/{train,val}/<class>/<i>.png``: small random RGB images."""
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for name in classes:
            (root / split / name).mkdir(parents=True)
            for i in range(n):
                pixels = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / split / name / f"{i}.png")
    return root


def special_entries(folder: Path) -> dict[str, str]:
    """Add every kind of entry that is not a regular file; their expected reasons."""
    os.mkfifo(folder / "pipe.png")
    (folder / "zero.png").symlink_to("/dev/zero")
    (folder / "loop.png").symlink_to("loop.png")
    (folder / "broken.jpg").symlink_to("missing.jpg")
    (folder / "pipe-link.png").symlink_to(folder / "pipe.png")
    (folder / "dirloop").symlink_to("dirloop")  # no image extension: ignored, no error
    os.mkfifo(folder / "notes")  # no image extension: ignored
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(folder / "sock.png"))
    server.close()
    return {
        "pipe.png": "a named pipe",
        "zero.png": "a device",
        "loop.png": "a link loop",
        "broken.jpg": "a broken link",
        "pipe-link.png": "a named pipe",
        "sock.png": "a socket",
    }


def test_scan_lists_regular_files_only_and_records_the_rest(tmp_path: Path) -> None:
    root = images(tmp_path / "data", n=2)
    folder = root / "train" / "a"
    reasons = special_entries(folder)
    scan = FolderScan([root])
    found = scan.files(folder, EXTENSIONS)
    assert found == [str(folder / "0.png"), str(folder / "1.png")]
    assert {Path(s.path).name: s.reason for s in scan.skipped} == reasons
    assert {s.kind for s in scan.skipped} == {"file"}
    assert scan.subfolders(root / "train") == ["a", "b"]
    with pytest.warns(UserWarning) as caught:
        warn_skipped_links(scan.skipped, root / "train", "data.init_args.train_dir")
    (message,) = [str(w.message) for w in caught]
    assert message.startswith(
        f"data.init_args.train_dir: skipped 6 entries under {root / 'train'} that are not a "
        "regular file (never opened: a named pipe would wait forever): "
    )
    assert f"{folder / 'broken.jpg'} (a broken link); " in message
    assert message.endswith("; and 3 more") and "directory link" not in message


def test_a_class_folder_link_loop_is_no_error(tmp_path: Path) -> None:
    root = images(tmp_path / "data", n=1)
    (root / "train" / "c").symlink_to("c")
    assert FolderScan([root]).subfolders(root / "train") == ["a", "b"]


def test_scan_is_bounded(tmp_path: Path) -> None:
    root = images(tmp_path / "data", n=4)
    scan = FolderScan([root], max_entries=6)
    scan.files(root / "train" / "a", EXTENSIONS)  # 4 entries
    with pytest.raises(DataError, match=r"^scanning .*/train/b: more than 6 entries listed; "):
        scan.files(root / "train" / "b", EXTENSIONS)


def test_read_image_refuses_a_named_pipe_at_once(tmp_path: Path) -> None:
    pipe = tmp_path / "pipe.png"
    os.mkfifo(pipe)
    result: list[BaseException | None] = []

    def read() -> None:
        try:
            read_image(str(pipe))
            result.append(None)
        except BaseException as err:
            result.append(err)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=20)
    if reader.is_alive():  # blocked in open(): give it a writer so the thread can end
        os.close(os.open(pipe, os.O_WRONLY))
        reader.join()
        pytest.fail("read_image blocked on a named pipe")
    (err,) = result
    assert isinstance(err, CorruptImageError)
    assert str(err).startswith(f"cannot read image {pipe}: not a regular file (a named pipe")


# Both fits in one process (one interpreter start and torch import, not two): ``ncl-cli``'s
# entry point called once per argument list, a marker line on both streams before each.
FITS = textwrap.dedent(
    """
    import json, sys
    from ncl_lightning.runtime.cli import main
    for args in json.loads(sys.argv[1]):
        print("=== next fit ===", flush=True)
        print("=== next fit ===", file=sys.stderr, flush=True)
        main(args)
    """
)
EXTRAS = {
    "skip_corrupt": ["--data.skip_corrupt", "true", "--data.num_workers", "0"],  # every file read
    "cache": ["--data.cache", "memory", "--data.num_workers", "2"],  # decoded once, in workers
}


@pytest.mark.slow
def test_fit_with_special_files_in_the_folder_ends(tmp_path: Path) -> None:
    """The real ``ncl-cli fit`` in a subprocess (a hang fails the test, it cannot hang it;
    before, both runs waited for ever on the named pipes): with ``skip_corrupt`` and with a
    memory cache decoded by loader workers, each on its own folder."""
    runs: list[tuple[Path, list[str]]] = []
    for name, extra in EXTRAS.items():
        root = images(tmp_path / name / "data")
        special_entries(root / "train" / "a")
        os.mkfifo(root / "val" / "b" / "pipe.jpg")
        run = tmp_path / name / "run"
        args = [
            "fit", "--config", str(ROOT / "configs" / "demo" / "digits_ncl.yaml"),
            "--data", "ncl_lightning.data.ImageFolderDataModule",
            "--data.root", str(root), "--data.batch_size", "4", "--data.image_size", "32",
            *extra,
            "--model.init_args.backbone.in_channels", "3",
            "--model.init_args.backbone.width", "8",
            "--trainer.max_steps", "2", "--trainer.limit_val_batches", "1",
            "--trainer.enable_progress_bar", "false",
            "--trainer.default_root_dir", str(run),
            "--trainer.logger.init_args.save_dir", str(run),
        ]  # fmt: skip
        runs.append((root, args))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    argv = json.dumps([args for _, args in runs])
    done = subprocess.run([sys.executable, "-c", FITS, argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    stdout, stderr = (text.split("=== next fit ===\n")[1:] for text in (done.stdout, done.stderr))
    assert len(stdout) == len(stderr) == len(runs), (done.stdout + done.stderr)[-3000:]
    for (root, _), out in zip(runs, map("".join, zip(stdout, stderr, strict=True)), strict=True):
        assert f"skipped 6 entries under {root / 'train'} that are not a regular file" in out
        assert f"skipped 1 entry under {root / 'val'} that is not a regular file" in out
        assert f"{root / 'val' / 'b' / 'pipe.jpg'} (a named pipe)" in out
