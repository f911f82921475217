#!/usr/bin/env bash
# device_run.sh: the one script run on the GPU machine (an H200), from the
# repo root, with OUT set to a folder whose files come back.
#
# Binaries are PREBUILT on the build machine (scripts/device_prepare.sh: stripped,
# gzipped in .carry/bin, unpacked here into build/cuda); libcjson.so.1 is carried in
# .carry/lib, the tokenized data in .carry/data. Nothing is
# compiled here and no GPU setting (clocks, persistence, MIG) is touched.
#
# Stages, run in FORGE_STAGES' order (each logged to $OUT/<stage>.log, each under
# its own timeout so the summary always prints inside the caller's 10-minute limit):
#   parity          build/cuda/forge_gpu_tests: every op of the op list against
#                   the CPU reference (the GEMM-backed ops under every matmul
#                   mode), properties, the kernel suites
#   lab             build/cuda/forge-lab's variant tests (every `test` command)
#   memcheck        compute-sanitizer memcheck over the quick shape list
#   train, bench    optional: run only if lab/scripts/device_train.sh /
#                   lab/scripts/device_bench.sh exist and are executable
# The summary table (stage, result, seconds) is printed LAST and saved to
# $OUT/summary.txt. Exit status 1 if any stage failed.
set -o pipefail
set -u

OUT=${OUT:-/tmp/forge-device-out}
mkdir -p "$OUT"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$PWD/.carry/lib:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
T_PARITY=${FORGE_T_PARITY:-150}
T_MEMCHECK=${FORGE_T_MEMCHECK:-120}
T_OPTIONAL=${FORGE_T_OPTIONAL:-150}
# Which stages run, in order (one device call has 10 minutes: split long lists
# over two calls). Built in: parity, lab, memcheck, sass. Any other
# name runs scripts/device_<name>.sh (gate, sanitize) or else the lab's
# lab/scripts/device_<name>.sh (train, bench, epi, fp8, flash32, flash16, order,
# ...) with timeout FORGE_T_<NAME> (else FORGE_T_OPTIONAL).
STAGE_LIST=${FORGE_STAGES:-parity memcheck train bench}

RESULTS_BEFORE=$(echo results/*/) # only result folders written during this call come back
STAGES=()
RESULTS=()
SECONDS_USED=()

# run_stage NAME TIMEOUT_S LOG CMD...: runs CMD with a timeout, tees to LOG,
# records pass/fail/timeout and the wall time
run_stage() {
    local name=$1 limit=$2 log=$3
    shift 3
    echo
    echo "==== stage $name: $* (timeout ${limit}s)"
    local t0 rc result
    t0=$(date +%s)
    timeout --signal=TERM --kill-after=10 "$limit" "$@" 2>&1 | tee "$log"
    rc=$?
    case $rc in
        0) result=pass ;;
        124 | 137) result="timeout(${limit}s)" ;;
        *) result="fail(rc=$rc)" ;;
    esac
    STAGES+=("$name")
    RESULTS+=("$result")
    SECONDS_USED+=("$(($(date +%s) - t0))")
}

skip_stage() {
    STAGES+=("$1")
    RESULTS+=("skipped: $2")
    SECONDS_USED+=("0")
}

{
    echo "==== machine"
    nvidia-smi -L || echo "nvidia-smi -L failed"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader || true
    echo "nvcc: $( (command -v nvcc >/dev/null && nvcc --version | tail -n 2 | tr '\n' ' ') || \
        ("$CUDA_HOME/bin/nvcc" --version 2>/dev/null | tail -n 2 | tr '\n' ' ') || echo 'not found')"
    echo "libcublas: $(ldconfig -p 2>/dev/null | grep -m1 'libcublas.so.13' || ls "$CUDA_HOME"/lib64/libcublas.so.13 2>/dev/null || echo 'not in ldconfig; relying on LD_LIBRARY_PATH')"
    echo "host: $(uname -srm), $(nproc) cpus"
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
} 2>&1 | tee "$OUT/env.txt"

# binaries carried gzipped by scripts/device_prepare.sh: .carry/bin -> build/cuda, .carry/bin-san -> build/cuda-san
for pair in bin:cuda bin-san:cuda-san; do
    src=.carry/${pair%%:*} dst=build/${pair##*:}
    [ -d "$src" ] || continue
    mkdir -p "$dst"
    for f in "$src"/*.gz; do
        b=$dst/$(basename "$f" .gz)
        gunzip -c "$f" >"$b" && chmod +x "$b"
    done
done

GPU_TESTS=build/cuda/forge_gpu_tests
LAB=build/cuda/forge-lab
SANITIZER=$(command -v compute-sanitizer || echo "$CUDA_HOME/bin/compute-sanitizer")
if [ -x "$GPU_TESTS" ] && ldd "$GPU_TESTS" | grep -q 'not found'; then
    echo "missing shared libraries for $GPU_TESTS:"
    ldd "$GPU_TESTS" | grep 'not found'
fi

# gpu_tests_stage NAME TIMEOUT ARGS...: a stage of build/cuda/forge_gpu_tests, or its failure when the binary is missing
gpu_tests_stage() {
    local name=$1 limit=$2
    shift 2
    if [ -x "$GPU_TESTS" ]; then
        run_stage "$name" "$limit" "$OUT/$name.log" "$@"
    else
        echo "$GPU_TESTS is missing: build with \`make cuda ARCH=x86-64-v3\` and carry build/cuda"
        STAGES+=("$name")
        RESULTS+=("fail(binary missing)")
        SECONDS_USED+=("0")
    fi
}

# ---- the stages, in FORGE_STAGES' order ----------------------------------------
for name in $STAGE_LIST; do
    case $name in
    parity) gpu_tests_stage parity "$T_PARITY" "$GPU_TESTS" ;;
    parity_ops)
        # the op walk of the ops named in FORGE_PARITY_OPS only (a quick check of changed kernels)
        gpu_tests_stage parity_ops "$T_PARITY" "$GPU_TESTS" --op "${FORGE_PARITY_OPS:?}"
        ;;
    memcheck)
        if [ -x "$SANITIZER" ]; then
            gpu_tests_stage memcheck "$T_MEMCHECK" "$SANITIZER" --tool memcheck --error-exitcode 1 "$GPU_TESTS" --quick
        else
            skip_stage memcheck "compute-sanitizer not found"
        fi
        ;;
    lab) # the lab's variant tests: every `forge-lab test NAME`
        if [ -x "$LAB" ]; then
            run_stage lab "${FORGE_T_LAB:-$T_PARITY}" "$OUT/lab.log" bash -c \
                "fails=0; for t in \$($LAB --help | awk '\$1 == \"test\" {print \$2}'); do echo \"== forge-lab test \$t\"; $LAB test \$t || fails=1; done; exit \$fails"
        else
            skip_stage lab "$LAB missing: make lab ARCH=x86-64-v3"
        fi
        ;;
    sass) # which matrix unit each kernel uses (cuobjdump is on the device)
        run_stage sass 120 "$OUT/sass.log" sh scripts/check_sass.sh build/cuda/forge build/cuda/forge-lab
        ;;
    *) # scripts/device_<name>.sh, else lab/scripts/device_<name>.sh
        script=scripts/device_$name.sh
        [ -f "$script" ] || script=lab/scripts/device_$name.sh
        if [ ! -f "$script" ]; then
            skip_stage "$name" "device_$name.sh missing (scripts/, lab/scripts/)"
            continue
        fi
        var=FORGE_T_$(echo "$name" | tr 'a-z-' 'A-Z_')
        run_stage "$name" "${!var:-$T_OPTIONAL}" "$OUT/$name.log" bash "$script"
        ;;
    esac
done

# ---- summary: last ------------------------------------------------------------
failed=0
for r in "${RESULTS[@]}"; do
    case $r in pass | skipped*) ;; *) failed=1 ;; esac
done
{
    echo
    echo "==== summary"
    printf '%-16s %-22s %8s\n' stage result seconds
    for i in "${!STAGES[@]}"; do
        printf '%-16s %-22s %8s\n' "${STAGES[$i]}" "${RESULTS[$i]}" "${SECONDS_USED[$i]}"
    done
    for log in parity lab memcheck; do
        [ -f "$OUT/$log.log" ] && printf '%-16s %s\n' "$log" "$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$OUT/$log.log" | tail -n 1)"
    done
} 2>&1 | tee "$OUT/summary.txt"
# At most 8 files come back: everything but the summary goes into one archive,
# with the harness results written during this call (results/<date>_<commit>/).
for d in results/*/; do
    case " $RESULTS_BEFORE " in *" $d "*) ;; *) mkdir -p "$OUT/results" && cp -r "$d" "$OUT/results/" ;; esac
done
(cd "$OUT" && tar czf /tmp/forge-device-logs.tgz --exclude=./summary.txt . &&
    find . -mindepth 1 -maxdepth 1 ! -name summary.txt -exec rm -rf {} + && mv /tmp/forge-device-logs.tgz logs.tgz)
exit $failed
