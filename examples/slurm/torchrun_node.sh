#!/bin/bash
# Several nodes without SLURM: run this once on every node, with the same MASTER_ADDR,
# MASTER_PORT and RUN_ID, and NODE_RANK 0..NNODES-1.
#
#   MASTER_ADDR=node0 NNODES=2 NODE_RANK=0 RUN_ID=in100-ncl-a examples/slurm/torchrun_node.sh
#   MASTER_ADDR=node0 NNODES=2 NODE_RANK=1 RUN_ID=in100-ncl-a examples/slurm/torchrun_node.sh
#
# torchrun starts one process per GPU (GPUS_PER_NODE) and Lightning reads the ranks from
# its environment. The run id names the run's folder and W&B run, so a restart of the same
# command with the same RUN_ID resumes it (--auto_resume true). NCCL settings for a
# cluster (NCCL_DEBUG, NCCL_SOCKET_IFNAME, NCCL_IB_DISABLE): see pretrain.sbatch and
# docs/cluster.md.
set -euo pipefail
CONFIG=${CONFIG:-configs/imagenet100_ncl.yaml}
GPUS_PER_NODE=${GPUS_PER_NODE:-$(nvidia-smi -L | wc -l)}

torchrun --nnodes "$NNODES" --node_rank "$NODE_RANK" --nproc_per_node "$GPUS_PER_NODE" \
    --master_addr "$MASTER_ADDR" --master_port "${MASTER_PORT:-29500}" --no-python \
    ncl-cli fit --config "$CONFIG" --auto_resume true --run_id "$RUN_ID" \
    --trainer.num_nodes "$NNODES" --trainer.devices "$GPUS_PER_NODE" "$@"
