#!/usr/bin/env bash
# device_ncu_sdpa.sh: Nsight Compute over forge's bf16 flash forward and cuDNN's (PyTorch SDPA, CUDNN_ATTENTION) at
# the D = 64 shapes where their kernels are closest (issue 18), on the GPU machine from the repo root (binaries in
# .carry/bin, libcjson in .carry/lib). Per kernel: duration, DRAM bytes read and written, L2 hit rate and bytes, grid,
# registers, occupancy, tensor pipe busy, MUFU (xu) and issue slots used. Reports go to NCU_DIR (default $OUT); a
# short table is printed last. The carried binaries (.carry/bin/*.gz, as scripts/device_prepare.sh packs them) are
# unpacked into build/cuda first.
# ncu runs with --clock-control none (the device's method: never touch clocks). NCU_FORGE_ONLY=1: forge's kernels only.
set -u
D=${NCU_DIR:-${OUT:?set OUT}}
mkdir -p "$D"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$PWD/.carry/lib:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
NCU=$(command -v ncu || echo "$CUDA_HOME/bin/ncu")
mkdir -p build/cuda
for f in .carry/bin/*.gz; do
    [ -e "$f" ] || continue
    b=build/cuda/$(basename "$f" .gz)
    gunzip -c "$f" >"$b" && chmod +x "$b"
done
METRICS=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct
METRICS=$METRICS,lts__t_bytes.sum
METRICS=$METRICS,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__block_size
METRICS=$METRICS,launch__registers_per_thread,launch__shared_mem_per_block_dynamic,smsp__inst_executed.sum
METRICS=$METRICS,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
METRICS=$METRICS,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__inst_issued.avg.pct_of_peak_sustained_active
cat >/tmp/ncu_sdpa_once.py <<'EOF'
import sys
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
B, H, T, Dh = map(int, sys.argv[1:5])
g = torch.Generator(device="cuda").manual_seed(1)
q, k, v = ((torch.rand(B, H, T, Dh, generator=g, device="cuda") * 2 - 1).to(torch.bfloat16) for _ in range(3))
with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
    for _ in range(12):
        F.scaled_dot_product_attention(q, k, v, is_causal=True)
torch.cuda.synchronize()
EOF
for shape in "64 8 1024 64" "64 6 512 64" "16 12 1024 64"; do
    set -- $shape
    tag=$1x$2x$3x$4
    timeout 100 "$NCU" --clock-control none --metrics "$METRICS" -k "regex:fw_fwd" --launch-skip 5 --launch-count 1 \
        build/cuda/forge bench attention --device cuda --reps 30 --results /tmp/ncu-sdpa-results \
        --only "flash_bf16_fwd_default@fwd B=$1 H=$2 T=$3" >"$D/ncu-forge-$tag.txt" 2>&1
    echo "forge $tag rc=$?"
    [ "${NCU_FORGE_ONLY:-0}" = 1 ] && continue
    timeout 100 "$NCU" --clock-control none --metrics "$METRICS" -k "regex:sdpa|fmha|flash|attn|attention" \
        --launch-skip 8 --launch-count 1 python3 /tmp/ncu_sdpa_once.py "$@" >"$D/ncu-cudnn-$tag.txt" 2>&1
    echo "cudnn $tag rc=$?"
done
echo "== ncu: forge's forward and cuDNN's at the D = 64 shapes (one launch each, --clock-control none)"
for f in "$D"/ncu-forge-*.txt "$D"/ncu-cudnn-*.txt; do
    [ -e "$f" ] || continue
    awk -v file="$(basename "$f" .txt)" '
        /^  [A-Za-z_].*\(.*\)x\(.*\)/ { k = $1; sub(/[(<].*/, "", k); k = substr(k, 1, 40) }
        $1 ~ /^(gpu__time_duration|dram__bytes_read|dram__bytes_write|lts__t_sector_hit_rate|lts__t_bytes|sm__warps_active|launch__grid_size|launch__registers|launch__shared_mem|smsp__inst_executed|sm__pipe_tensor_op_hmma|sm__inst_executed_pipe_xu|sm__inst_issued)/ {
            n = $1; sub(/\..*/, "", n)
            v[n] = NF >= 3 ? $NF " " $(NF - 1) : $NF
        }
        END {
            printf "%-22s %-40s", file, k
            for (n in v) printf " %s=%s", n, v[n]
            printf "\n"
        }' "$f"
done
