"""``ncl-cli fit`` called from a thread (a notebook's or a study's worker): signals reach only
the main thread, so the pre-emption callback warns instead of failing in ``signal.signal``."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ncl_lightning.runtime.cli import main
from tests.helpers.cli import DEMO


def test_fit_outside_the_main_thread_trains_and_says_signals_do_not_reach_it(
    tmp_path: Path,
) -> None:
    errors: list[BaseException] = []

    def fit() -> None:
        try:
            main([
                "fit", "--config", str(DEMO / "digits_ncl.yaml"), "--trainer.max_steps", "1",
                "--trainer.limit_val_batches", "0", "--trainer.enable_progress_bar", "false",
                "--trainer.default_root_dir", str(tmp_path),
                "--trainer.logger.init_args.save_dir", str(tmp_path),
                "--model.init_args.backbone.init_args.width", "8",
            ])  # fmt: skip
        except BaseException as err:  # handed to the test thread
            errors.append(err)

    with pytest.warns(UserWarning, match="fit runs outside the main thread"):
        thread = threading.Thread(target=fit)
        thread.start()
        thread.join(timeout=300)
    assert not thread.is_alive() and not errors, errors
    assert list(tmp_path.rglob("last.ckpt"))
