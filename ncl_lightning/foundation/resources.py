"""The configs shipped with the package, found the same way in a checkout and an installed wheel.

The YAML files live once, in the repository's top-level ``configs/`` folder (where
``ncl-cli fit --config configs/cifar10_ncl.yaml`` reads them in a checkout);
``ncl_lightning/configs`` is a link to that folder, so a wheel carries them as package
data under ``ncl_lightning/configs/`` and ``importlib.resources`` finds them in both
cases. Names are paths relative to that folder, with or without ``.yaml``
(``"demo/digits_ncl"``, ``"ground_truth/overlays/predictor.yaml"``).
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from ncl_lightning.foundation.errors import ConfigError

SUFFIX = ".yaml"


def config_root() -> Path:
    """The folder of the packaged configs (``<package>/configs``) on the file system."""
    root = files("ncl_lightning") / "configs"
    if not isinstance(root, Path) or not root.is_dir():
        raise ConfigError(
            f"the packaged configs are not a folder on disk ({root}); install ncl-lightning "
            "from a wheel or a checkout, not a zip archive",
            key="config",
        )
    return root


def config_names() -> list[str]:
    """Every packaged config, as the name ``config_path`` takes (``"demo/digits_ncl"``)."""
    root = config_root()
    return sorted(p.relative_to(root).with_suffix("").as_posix() for p in root.rglob("*.yaml"))


def config_path(name: str) -> Path:
    """The file of the packaged config ``name`` (``"demo/digits_ncl"`` or ``"....yaml"``).

    Raises:
        ConfigError: When no packaged config has that name; the message lists them all.
    """
    stem = name.removesuffix(SUFFIX)
    path = config_root() / f"{stem}{SUFFIX}"
    if not path.is_file():
        raise ConfigError(
            f"no packaged config {name!r}; available: {', '.join(config_names())}",
            key="config",
        )
    return path


def config_file(name: str | Path) -> Path:
    """A config file: ``name`` itself when that file exists (absolute, or relative to the
    working folder), else the packaged config so named ([`config_path`][]).

    Raises:
        ConfigError: Neither (an absolute ``name``: not found; else the packaged names).
    """
    path = Path(name).expanduser()
    if path.is_file():
        return path
    if path.is_absolute():
        raise ConfigError(
            f"{name}: config file not found, and no packaged config of that name", key="config"
        )
    return config_path(str(name))


__all__ = ["config_file", "config_names", "config_path", "config_root"]
