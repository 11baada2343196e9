#!/usr/bin/env bash
# bench-gpu/run.sh: the GPU measurements of issue 43 in one run of at most ~8 minutes.
#
# What it measures (python -m benchmarks ..., docs/performance.md explains each):
#   1. env.txt: GPU, CPU count, versions, commit and uncommitted changes of this copy.
#   2. throughput-device.log: the bare rows (b) eager and (b') captured (torch.compile
#      mode="reduce-overhead"), and the full step (a) of CL, NCL and BayesNCL with device
#      views, one invocation per step mode (eager, graphs, compiled), CUDA-event timing;
#      the graphs and compiled invocations run with TORCH_LOGS=graph_breaks,recompiles.
#   3. step-224.log: NCL at 224 px (ResNet-18 ImageNet stem, batch 128, device views),
#      eager and graphs: host ms against device ms per step.
#   4. throughput-cpu.log: the full step with the CPU (torchvision) pipeline, eager and
#      graphs.
#   5. step-sync.log: pytest tests/methods/test_step_sync.py (if pytest is installed).
#   6. summary.md: every table, every per-run result line, graph-break and recompile
#      counts, each part's exit status and time.
# Each part has its own time limit and the whole run a budget (BENCH_GPU_BUDGET seconds,
# default 470): a part gets min(its limit, what is left), a part with less than 20 s left
# is skipped, and a part that is cut short keeps its per-run result lines (stderr).
#
# Needs: a CUDA GPU, python with torch, lightning, torchmetrics, torchvision, numpy,
# scikit-learn, matplotlib and pillow (the package's imports). jsonargparse (imported by
# ncl_lightning.runtime, which the benchmarks use for progress lines) and its extras are
# installed from bench-gpu/wheels/ when missing: make them with bench-gpu/fetch-wheels.sh
# on a machine with network and carry the folder. wandb is not needed.
#
# Data: the real CIFAR-10 subset (19 MB), NCL_BENCH_DATA (default ../shared/data/cifar10-
# real-subset, then bench-gpu/data/, data/ or shared/ cifar10-real-subset in this copy).
# The step-sync test reads ../shared/data/cifar10-real-subset: linked there when absent.
#
# Output: $OUT (default bench-gpu/out), six files. With the project's device tool, after
# bench-gpu/fetch-wheels.sh and `cp -rL ../shared/data/cifar10-real-subset bench-gpu/data/`
# (both folders git-ignored):
#   run(command="bash bench-gpu/run.sh", timeout_s=540,
#       carry=["bench-gpu/wheels", "bench-gpu/data"])
set -uo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-python}
OUT=${OUT:-bench-gpu/out}
BUDGET=${BENCH_GPU_BUDGET:-470}
START=$(date +%s)
mkdir -p "$OUT"
SUMMARY="$OUT/summary.md"
: >"$SUMMARY"
export PYTHONUNBUFFERED=1

say() { echo "$*" | tee -a "$SUMMARY"; }
left() { echo $((BUDGET - ($(date +%s) - START))); }

# part NAME LOG LIMIT COMMAND...: run COMMAND under its limit, stdout (the tables) to LOG
# and the summary, stderr to LOG, result lines copied to the summary.
part() {
	local name=$1 log=$2 limit=$3
	shift 3
	local remaining
	remaining=$(left)
	if ((remaining < 20)); then
		say "## $name: SKIPPED (budget of ${BUDGET}s spent)"
		return
	fi
	((limit > remaining)) && limit=$remaining
	say ""
	say "## $name (limit ${limit}s)"
	local tmp t0 rc
	tmp=$(mktemp)
	t0=$(date +%s)
	{
		echo "# $name: $*"
		echo
	} >>"$log"
	timeout --kill-after=5 "$limit" "$@" >"$tmp" 2> >(tee -a "$log" | grep --line-buffered -E '^\[[a-z0-9-]+\] result: ' >>"$SUMMARY")
	rc=$?
	sleep 1 # the stderr filter catches up
	cat "$tmp" >>"$log"
	cat "$tmp" >>"$SUMMARY"
	rm -f "$tmp"
	local verdict="exit $rc"
	((rc == 124 || rc == 137)) && verdict="CUT at the ${limit}s limit (exit $rc)"
	say ""
	say "$name: $verdict after $(($(date +%s) - t0))s"
}

# -- preflight ---------------------------------------------------------------------------
{
	echo "# bench-gpu/run.sh, $(date -u '+%Y-%m-%d %H:%M UTC')"
	nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
	echo "cpus: $(nproc)"
	"$PY" -V 2>&1
	echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
	echo "uncommitted changes:"
	git status --short 2>/dev/null | head -50
} >"$OUT/env.txt"

if ! "$PY" -c "import jsonargparse" 2>/dev/null; then
	if compgen -G "bench-gpu/wheels/*.whl" >/dev/null; then
		PYLIB=$(mktemp -d)
		if "$PY" -m pip --version >/dev/null 2>&1; then
			"$PY" -m pip install -q --no-index --no-deps --target "$PYLIB" bench-gpu/wheels/*.whl >>"$OUT/env.txt" 2>&1
			export PYTHONPATH="$PYLIB${PYTHONPATH:+:$PYTHONPATH}"
		else # pure-Python wheels import from the zip files themselves
			for w in bench-gpu/wheels/*.whl; do PYTHONPATH="$PWD/$w${PYTHONPATH:+:$PYTHONPATH}"; done
			export PYTHONPATH
		fi
		echo "jsonargparse: installed from bench-gpu/wheels" >>"$OUT/env.txt"
	else
		echo "jsonargparse: missing and no bench-gpu/wheels/*.whl (run bench-gpu/fetch-wheels.sh and carry it)" >>"$OUT/env.txt"
	fi
fi

if [[ -z ${NCL_BENCH_DATA:-} ]]; then
	for d in ../shared/data bench-gpu/data data shared/data; do
		d=$d/cifar10-real-subset
		if [[ -d $d/train ]]; then
			NCL_BENCH_DATA=$d
			break
		fi
	done
fi
export NCL_BENCH_DATA=${NCL_BENCH_DATA:-../shared/data/cifar10-real-subset}
if [[ -d $NCL_BENCH_DATA/train && ! -e ../shared/data/cifar10-real-subset ]]; then
	mkdir -p ../shared/data && ln -s "$(cd "$NCL_BENCH_DATA" && pwd)" ../shared/data/cifar10-real-subset
fi
echo "data: $NCL_BENCH_DATA" >>"$OUT/env.txt"

if ! "$PY" - >>"$OUT/env.txt" 2>&1 <<'PYEOF'; then
import torch, lightning, torchmetrics
import benchmarks.throughput  # every import the benchmarks need (from this checkout)
print("torch", torch.__version__, "cuda", torch.version.cuda, "| lightning", lightning.__version__,
      "| torchmetrics", torchmetrics.__version__)
print("gpu:", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "NONE")
import os
assert torch.cuda.is_available() or os.environ.get("BENCH_GPU_ALLOW_CPU") == "1", (
    "no CUDA device: this script measures a GPU (BENCH_GPU_ALLOW_CPU=1 tries it on a CPU)")
PYEOF
	say "preflight FAILED: see $OUT/env.txt"
	cat "$OUT/env.txt"
	exit 2
fi
say "# GPU benchmarks of issue 43 ($(grep -m1 '^gpu:' "$OUT/env.txt"), $(nproc) CPUs; commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown))"

# -- the parts, most wanted first ----------------------------------------------------------
BENCH=("$PY" -m benchmarks)
DEV="$OUT/throughput-device.log"
part "throughput, device views, eager" "$DEV" 100 \
	env NCL_BENCH_PIPELINES=device NCL_BENCH_MODES=eager NCL_BENCH_BARE=eager,captured \
	"${BENCH[@]}" throughput --repeats 1
part "throughput, device views, graphs" "$DEV" 100 \
	env NCL_BENCH_PIPELINES=device NCL_BENCH_MODES=graphs NCL_BENCH_BARE=eager,captured \
	TORCH_LOGS=graph_breaks,recompiles "${BENCH[@]}" throughput --repeats 1
part "step at 224 px, NCL, eager and graphs" "$OUT/step-224.log" 90 \
	env NCL_BENCH_METHODS=NCL NCL_BENCH_MODES=eager,graphs "${BENCH[@]}" step-224
part "throughput, device views, compiled" "$DEV" 80 \
	env NCL_BENCH_PIPELINES=device NCL_BENCH_MODES=compiled NCL_BENCH_BARE=eager \
	TORCH_LOGS=graph_breaks,recompiles "${BENCH[@]}" throughput --repeats 1
part "throughput, CPU views, eager and graphs" "$OUT/throughput-cpu.log" 60 \
	env NCL_BENCH_PIPELINES=cpu NCL_BENCH_MODES=eager,graphs NCL_BENCH_BARE=eager \
	"${BENCH[@]}" throughput --repeats 1
if "$PY" -c "import pytest" 2>/dev/null; then
	part "step-sync test" "$OUT/step-sync.log" 40 "$PY" -m pytest -q -p no:cacheprovider tests/methods/test_step_sync.py
else
	say "## step-sync test: SKIPPED (no pytest here)"
fi

say ""
say "## torch._dynamo, from TORCH_LOGS in $DEV"
count() { grep -c -i "$1" "$DEV" 2>/dev/null || true; }
say "graph-break log records: $(count 'graph break')"
say "recompile log records: $(count 'recompiling')"
say "total $(($(date +%s) - START))s of a ${BUDGET}s budget"
