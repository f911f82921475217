# shellcheck shell=bash
# flash_parity.sh: sourced by the lab's flash device scripts (from the repo root, OUT set, binaries prebuilt):
# scripts/device_lib.sh's environment (the carried libraries on the loader's path) and
#   flash_parity NAME LAB_TIMEOUT: `forge_gpu_tests --only flash16` (forge's kernels through its entries, 100 s)
#   into $OUT/NAME_parity_forge.txt and `forge-lab test flash16` (every kernel and variant by name, LAB_TIMEOUT s)
#   into $OUT/NAME_parity.txt; prints each one's summary line and the first 20 FAIL lines; returns 1 if either
#   failed.
# shellcheck source=scripts/device_lib.sh
source scripts/device_lib.sh
mkdir -p "$OUT"

flash_parity() {
    local name=$1 lab_timeout=$2 rc=0
    local forge_log="$OUT/${name}_parity_forge.txt" lab_log="$OUT/${name}_parity.txt"
    timeout 100 build/cuda/forge_gpu_tests --only flash16 >"$forge_log" 2>&1 || rc=1
    timeout "$lab_timeout" build/cuda/forge-lab test flash16 >"$lab_log" 2>&1 || rc=1
    tail -1 "$forge_log"
    tail -1 "$lab_log"
    grep -h "^FAIL" "$forge_log" "$lab_log" | head -20
    return $rc
}
