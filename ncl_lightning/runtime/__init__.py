"""Run-time shell pieces that act on the process: signals, run-folder locks and the
command line's values over a resumed checkpoint's. ``ncl-cli`` installs them on every
run; a Python user can add the callbacks to a plain ``Trainer``."""

from ncl_lightning.runtime.resume import overlay_explicit
from ncl_lightning.runtime.runs import RunFolderInUseError, RunLock
from ncl_lightning.runtime.signals import Preemption

__all__ = ["Preemption", "RunFolderInUseError", "RunLock", "overlay_explicit"]
