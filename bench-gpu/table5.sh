#!/usr/bin/env bash
# bench-gpu/table5.sh: the NCL paper's Table 5 rows (SCL, SCL + reg, spectral NCL; App. D.2)
# on the real CIFAR-10 subset, 3 seeds, on one GPU: pre-training with
# configs/subset/cifar10_subset_spectral_{cl,cl_l1,ncl}.yaml, then the linear probe
# (configs/eval/cifar10_subset_linear.yaml) on h (encoder) and on z (projector output).
# The 9 (method, seed) chains run JOBS at a time (default all 9); each step has its own
# time limit (FIT_S, PROBE_S seconds). SPACES picks the probes (default "h z"); a chain
# whose pre-training finished in an earlier run into the same OUT reuses it.
#
# Output ($OUT): summary.tsv (method, seed, val/z/sparsity of the last pre-training
# validation, probe top-1 on h and z), logs.tar.gz (every metrics.csv and log tail).
# Needs jsonargparse from bench-gpu/wheels (bench-gpu/fetch-wheels.sh) and the subset in
# bench-gpu/data/cifar10-real-subset; carry both:
#   run(command="bash bench-gpu/table5.sh", timeout_s=330,
#       carry=["bench-gpu/wheels", "bench-gpu/data"])
# ACCEL=cpu EPOCHS=1 PROBE_EPOCHS=1 LIMIT=2 METHODS=spectral_cl SEEDS=0 try it on a CPU;
# ACCEL=cpu JOBS=2 FIT_S=1800 PROBE_S=1800 runs the whole table on a 2-core CPU.
set -uo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-python}
OUT=${OUT:-bench-gpu/out}
ACCEL=${ACCEL:-gpu}
DATA=${DATA:-bench-gpu/data/cifar10-real-subset}
EPOCHS=${EPOCHS:-10}
PROBE_EPOCHS=${PROBE_EPOCHS:-30}
LIMIT=${LIMIT:-1.0}
FIT_S=${FIT_S:-170}
PROBE_S=${PROBE_S:-60}
JOBS=${JOBS:-9}
SPACES=${SPACES:-h z}
mkdir -p "$OUT/runs"
export PYTHONUNBUFFERED=1 WANDB_MODE=offline

if ! "$PY" -c "import jsonargparse" 2>/dev/null; then
	PYLIB=$(mktemp -d)
	"$PY" -m pip install -q --no-index --no-deps --target "$PYLIB" bench-gpu/wheels/*.whl
	export PYTHONPATH="$PYLIB"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

chain() { # chain METHOD SEED
	local m=$1 s=$2 d="$OUT/runs/$1/s$2"
	mkdir -p "$d"
	local common=(--seed_everything "$s" --trainer.accelerator "$ACCEL"
		--trainer.enable_progress_bar false --trainer.limit_train_batches "$LIMIT"
		--data.init_args.root "$DATA")
	local ckpt
	ckpt=$(ls "$d"/pre/*/version_0/checkpoints/last.ckpt 2>/dev/null | head -1)
	if [[ -z $ckpt ]]; then # a finished pre-training (same OUT) is reused
		timeout "$FIT_S" "$PY" -m ncl_lightning.runtime.cli fit \
			--config "configs/subset/cifar10_subset_$m.yaml" "${common[@]}" \
			--trainer.max_epochs "$EPOCHS" --trainer.check_val_every_n_epoch "$EPOCHS" \
			--trainer.default_root_dir "$d/pre" >"$d/fit.log" 2>&1
		echo "fit exit $?" >>"$d/fit.log"
		ckpt=$(ls "$d"/pre/*/version_0/checkpoints/last.ckpt 2>/dev/null | head -1)
	fi
	[[ -n $ckpt ]] || return
	for space in $SPACES; do
		rm -rf "$d/probe_$space"
		timeout "$PROBE_S" "$PY" -m ncl_lightning.runtime.cli fit \
			--config configs/eval/cifar10_subset_linear.yaml "${common[@]}" \
			--model.checkpoint "$ckpt" --model.init_args.space "$space" \
			--trainer.max_epochs "$PROBE_EPOCHS" \
			--trainer.check_val_every_n_epoch "$PROBE_EPOCHS" \
			--trainer.default_root_dir "$d/probe_$space" >"$d/probe_$space.log" 2>&1
		echo "probe exit $?" >>"$d/probe_$space.log"
	done
}

for m in ${METHODS:-spectral_cl spectral_cl_l1 spectral_ncl}; do
	for s in ${SEEDS:-0 1 2}; do
		while (($(jobs -rp | wc -l) >= JOBS)); do wait -n; done
		chain "$m" "$s" &
	done
done
wait

"$PY" - "$OUT" <<'PYEOF'
import csv, sys
from pathlib import Path

out = Path(sys.argv[1])

def last(path: Path, key: str) -> str:
    files = sorted(path.glob("*/version_0/metrics.csv"))
    if not files:
        return "missing"
    value = "missing"
    with open(files[0], newline="") as f:
        for row in csv.DictReader(f):
            if row.get(key):
                value = row[key]
    return value

rows = ["method\tseed\tval/z/sparsity\tval/online_acc\tprobe_h_top1\tprobe_z_top1"]
for method in ("spectral_cl", "spectral_cl_l1", "spectral_ncl"):
    for seed in (0, 1, 2):
        d = out / "runs" / method / f"s{seed}"
        rows.append("\t".join([
            method, str(seed), last(d / "pre", "val/z/sparsity"), last(d / "pre", "val/online_acc"),
            last(d / "probe_h", "val/offline_linear/acc_top1"),
            last(d / "probe_z", "val/offline_linear_z/acc_top1"),
        ]))
(out / "summary.tsv").write_text("\n".join(rows) + "\n")
print("\n".join(rows))
PYEOF
for f in "$OUT"/runs/*/s*/*.log; do tail -n 5 "$f" >"$f.tail"; done
tar czf "$OUT/logs.tar.gz" --exclude='*.ckpt' --exclude='*.png' -C "$OUT" runs 2>/dev/null
rm -rf "$OUT/runs"
