"""A W&B logger whose faults never stop training: it falls back to offline W&B, then to CSV."""

from __future__ import annotations

import netrc
import numbers
import os
import secrets
import shutil
import socket
import string
import threading
import urllib.parse
import urllib.request
import uuid
from argparse import Namespace
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers import WandbLogger as _LightningWandbLogger
from lightning.pytorch.loggers.logger import DummyExperiment, rank_zero_experiment
from lightning.pytorch.utilities import rank_zero_info, rank_zero_only, rank_zero_warn
from torch import Tensor, nn

from ncl_lightning.callbacks.wandb_tables import dimension_table, metric_definition

PROBE_TIMEOUT_S = 3.0
ONLINE_MODES = ("online", "run", "shared")  # the others: offline, dryrun, disabled


def _unreachable(url: str) -> str | None:
    """Why a TCP connection to ``url``'s host (or its proxy) fails within 3 s, or None."""
    parts = urllib.parse.urlsplit(url)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(parts.hostname or ""):
        parts = urllib.parse.urlsplit(proxy)
    address = (parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))
    result: list[str | None] = []

    def probe() -> None:
        try:
            socket.create_connection(address, timeout=PROBE_TIMEOUT_S).close()
            result.append(None)
        except OSError as err:
            result.append(f"{type(err).__name__}: {err}")

    thread = threading.Thread(target=probe, daemon=True)  # DNS lookups ignore the timeout
    thread.start()
    thread.join(PROBE_TIMEOUT_S)
    problem = result[0] if result else f"no answer in {PROBE_TIMEOUT_S:g} s"
    return None if problem is None else f"cannot reach {url}: {problem}"


def _has_credentials(url: str) -> bool:
    """Whether wandb will find credentials for ``url``: ``WANDB_API_KEY``,
    ``WANDB_IDENTITY_TOKEN_FILE`` or a ``.netrc`` entry (``$NETRC`` or ``~/.netrc``)."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    path = os.environ.get("NETRC") or os.path.expanduser("~/.netrc")
    host = urllib.parse.urlsplit(url).hostname or ""
    try:
        return netrc.netrc(path).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def save_run_file(logger: _LightningWandbLogger, path: str | Path, name: str) -> None:
    """Copy ``path`` into the W&B run's folder as ``name`` (a copy, not wandb's symlink: the
    run keeps it if the source moves) and upload it with the run."""
    run = logger.experiment
    target = os.path.join(run.dir, name)
    shutil.copyfile(path, target)
    run.save(target, base_path=run.dir, policy="now")


def log_site(
    logger: _LightningWandbLogger, key: str, page: str, folder: str | Path, artifact: str, kind: str
) -> None:
    """Log a single-file HTML ``page`` as a W&B HTML panel under ``key``, and the whole site
    ``folder`` (its page and images) as an artifact ``artifact`` of type ``kind``."""
    import wandb  # the logger's own dependency, imported where it is used

    run = logger.experiment
    run.log({key: wandb.Html(page, inject=False)})
    site = wandb.Artifact(artifact, type=kind)
    site.add_dir(str(folder))
    run.log_artifact(site)


def new_run_id() -> str:
    """A new W&B run id as wandb makes one: 8 random lower-case letters and digits."""
    return "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))


def _scalar(value: Any) -> bool:
    return isinstance(value, numbers.Number) or (isinstance(value, Tensor) and value.numel() == 1)


def short_path(path: Path | str) -> str:
    """``path`` relative to the working directory when it lies below it, else as given."""
    relative = os.path.relpath(path)
    return str(path) if relative.startswith("..") else relative


class WandbLogger(_LightningWandbLogger):
    """Lightning's ``WandbLogger`` (same arguments, and ``folder``) that lets no W&B fault
    stop training: it falls back to offline W&B, then to a ``CSVLogger``, with one warning
    (when and where: ``docs/wandb.md``, "Offline runs and syncing"). A W&B run of another
    id still open in this process is finished first, not continued. With a ``save_dir``,
    wandb's own files go into the run's folder, ``<save_dir>/<folder>/<run id>/wandb/`` (a
    new run's id is chosen before ``wandb.init`` for that), beside its checkpoints.

    Args:
        folder: Name of the run's local folder, ``<save_dir>/<folder>/<run id>``; default:
            ``name``, else the project.
        **kwargs: Lightning's ``WandbLogger`` arguments and further ``wandb.init`` ones.
    """

    def __init__(self, *, folder: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if self._wandb_init.get("anonymous") is None:  # wandb warns at any value of it
            self._wandb_init.pop("anonymous", None)
        self._folder = folder
        self._csv: CSVLogger | None = None
        self._hparams: dict[str, Any] | Namespace = {}
        self._config_logged = False  # ncl-cli's whole config: the W&B config
        self._defined: set[str] = set()

    @property
    def name(self) -> str | None:
        """The name of the run's folder, ``<save_dir>/<name>/<run id>``: ``folder`` when
        given, else the run's ``name`` (the packaged configs: the config's name), else the
        project (Lightning's choice)."""
        return self._folder or self._wandb_init.get("name") or super().name

    @property
    @rank_zero_experiment
    def experiment(self) -> Any:
        """The wandb run, started on first use; a no-op stand-in once logging went to CSV."""
        if self._experiment is None and self._csv is None:
            self._start()
        return DummyExperiment() if self._csv is not None else self._experiment

    def _online_problem(self) -> str | None:
        """Why an online run cannot start (no credentials, unreachable host), or None."""
        import wandb

        mode = "offline" if self._offline else self._wandb_init.get("mode")
        if (
            wandb.run is not None
            or (mode or os.environ.get("WANDB_MODE", "online")) not in ONLINE_MODES
        ):
            return None  # Lightning reuses the run; offline: nothing to check
        url = os.environ.get("WANDB_BASE_URL") or wandb.Settings().base_url
        return _unreachable(url) if _has_credentials(url) else "no API key"

    def _start(self) -> None:
        import wandb

        if wandb.run is not None and self._id and wandb.run.id != self._id:
            # Lightning would log into it; an earlier fit in this process left it open
            rank_zero_warn(f"W&B run {wandb.run.id} still open; finished to start {self._id}")
            wandb.finish()
        own_folder = wandb.run is None and self.save_dir is not None
        if own_folder:  # W&B's files in the run's folder, <save_dir>/<name>/<id>/wandb/
            self._id = self._id or new_run_id()
            folder = os.path.join(self.save_dir, self.name or "", self._id)
            self._wandb_init.update(id=self._id, dir=folder)
        if self._wandb_init.get("dir"):
            # absolute: a wandb service started by a parent process (WANDB_SERVICE, inherited
            # by ncl-cli run from a notebook or a script that used wandb) resolves a relative
            # dir against its own working directory, not this process's
            self._wandb_init["dir"] = os.path.abspath(self._wandb_init["dir"])
            os.makedirs(self._wandb_init["dir"], exist_ok=True)  # wandb looks for git from it
        reason = self._online_problem()
        if reason is None:
            try:
                _LightningWandbLogger.experiment.fget(self)  # type: ignore[attr-defined]
            except Exception as err:  # anything wandb.init raises
                self._experiment, reason = None, f"wandb.init failed: {type(err).__name__}: {err}"
        if reason is not None:
            self._wandb_init["mode"] = "offline"
            try:
                _LightningWandbLogger.experiment.fget(self)  # type: ignore[attr-defined]
            except Exception as err:
                self._experiment = None
                self._to_csv(f"W&B unavailable ({reason}; offline: {type(err).__name__}: {err})")
                return
        run = self._experiment
        if reason is not None or getattr(run, "offline", False):
            run_dir = short_path(run.settings.sync_dir)
            target = run_dir
            if own_folder:  # its wandb folder: every session of the run, and only those
                target = os.path.dirname(run_dir)
            elif self._id:  # the folders of all sessions of this run
                target = os.path.join(os.path.dirname(run_dir), f"offline-run-*-{run.id}")
            if reason is None:  # offline as asked: where the run went, one info line
                rank_zero_info(f"W&B offline; logging to {run_dir}; sync later with: "
                               f"wandb sync {target}")  # fmt: skip
            else:  # a fallback the user may want to fix: a warning
                rank_zero_warn(f"W&B unavailable ({reason}); logging offline to {run_dir}; "
                               f"sync later with: wandb sync {target}")  # fmt: skip

    def _to_csv(self, why: str) -> None:
        version = self.version or uuid.uuid4().hex[:8]
        self._id = self._id or version
        self._csv = CSVLogger(
            self.save_dir or ".", self.name, version, self._prefix, flush_logs_every_n_steps=1
        )
        if self._hparams:
            self._csv.log_hyperparams(self._hparams)
        where = short_path(os.path.join(self._csv.log_dir, "metrics.csv"))
        rank_zero_warn(f"{why}; logging metrics to {where} (media and tables are dropped)")

    def _wandb(self, what: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> bool:
        """Runs ``call`` (a parent method: checks arguments, then calls wandb); False: on CSV."""
        _ = self.experiment  # starts the run, or the CSV fallback
        if self._csv is not None:
            return False
        try:
            call(*args, **kwargs)
        except Exception as err:  # raised by the wandb call
            self._to_csv(f"W&B failed in {what} ({type(err).__name__}: {err})")
            return False
        return True

    def _define_and_log(self, metrics: Mapping[str, Any], step: int | None) -> None:
        """``define_metric`` for each key seen the first time, then Lightning's ``log_metrics``."""
        join = f"{self._prefix}{self.LOGGER_JOIN_CHAR}" if self._prefix else ""
        for name in (join + key for key in metrics if join + key not in self._defined):
            if (definition := metric_definition(name)) is not None:
                self.experiment.define_metric(name, **definition)
            self._defined.add(name)
        super().log_metrics(metrics, step)

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Lightning's ``log_metrics``; a key's first row also declares its x-axis and
        summary to W&B
        ([`metric_definition`][ncl_lightning.callbacks.wandb_tables.metric_definition])."""
        if not self._wandb("log_metrics", self._define_and_log, metrics, step) and self._csv:
            self._csv.log_metrics({k: v for k, v in metrics.items() if _scalar(v)}, step)

    @rank_zero_only
    def log_hyperparams(self, params: dict[str, Any] | Namespace) -> None:
        """Lightning's ``log_hyperparams``; after [`log_config`][] nothing: Lightning logs
        the module's and the DataModule's hyper-parameters at each fit and test, and they
        repeat the config's ``model`` and ``data`` sections."""
        if self._config_logged:
            return
        self._hparams = params
        if not self._wandb("log_hyperparams", super().log_hyperparams, params) and self._csv:
            self._csv.log_hyperparams(params)

    @rank_zero_only
    def log_config(self, config: dict[str, Any]) -> None:
        """Log the run's whole config (``ncl-cli``'s resolved config and its ``run``
        record) as the W&B config, each setting once: under its config key
        (``model.init_args.temperature``), not also flat as the module's hyper-parameter."""
        self.log_hyperparams(config)
        self._config_logged = True

    def watch(self, model: nn.Module, **kwargs: Any) -> None:
        self._wandb("watch", super().watch, model, **kwargs)

    @rank_zero_only
    def save_file(self, path: str | Path, name: str) -> None:
        """Copy ``path`` into the run's files as ``name`` and upload it (``wandb.save``,
        ``policy="now"``); skipped once logging went to CSV."""
        self._wandb("save_file", save_run_file, self, path, name)

    @rank_zero_only
    def log_site(self, key: str, page: str, folder: str | Path, artifact: str, kind: str) -> None:
        """[`log_site`][] (an HTML panel and an artifact); skipped once logging went to CSV."""
        self._wandb("log_site", log_site, self, key, page, folder, artifact, kind)

    @rank_zero_only
    def log_dimensions(
        self,
        key: str,
        columns: Mapping[str, list[Any]],
        images: Mapping[int, Any] | None = None,
        step: int | None = None,
    ) -> None:
        """Log FeatureStatistics' per-dimension ``columns`` (and ``images``) as a
        ``wandb.Table`` under ``key``
        ([`dimension_table`][ncl_lightning.callbacks.wandb_tables.dimension_table]); skipped
        once logging went to CSV."""
        self._wandb(
            "log_dimensions",
            lambda: self._define_and_log({key: dimension_table(columns, images)}, step),
        )

    def after_save_checkpoint(self, checkpoint_callback: ModelCheckpoint) -> None:
        self._wandb("after_save_checkpoint", super().after_save_checkpoint, checkpoint_callback)

    @rank_zero_only
    def finalize(self, status: str) -> None:
        if self._experiment is not None and self._csv is None:
            self._wandb("finalize", super().finalize, status)
        if self._csv is not None:
            self._csv.finalize(status)
