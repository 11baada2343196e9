#!/usr/bin/env bash
# Download, on a machine with network, the pure-Python wheels that bench-gpu/run.sh installs
# on a GPU machine that lacks them (jsonargparse and its signature extras: ncl_lightning's
# runtime package imports jsonargparse, and the benchmarks import runtime.progress).
# The versions are those of the project's own virtual environment. The wheels land in
# bench-gpu/wheels/ (git-ignored): carry that folder to the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
versions=$("$PY" - <<'PYEOF'
from importlib.metadata import version
print(" ".join(f"{n}=={version(n)}" for n in ("jsonargparse", "docstring-parser", "typeshed-client")))
PYEOF
)
"$PY" -m pip download --no-deps --only-binary=:all: -d bench-gpu/wheels $versions
ls -l bench-gpu/wheels
