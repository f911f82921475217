#!/bin/sh
# fuzz/run.sh SECONDS OUT TARGET...: runs each libFuzzer target OUT/fuzz_TARGET
# for SECONDS, one after the other (`make fuzz` calls this). Each starts from
# its committed seeds fuzz/corpus/TARGET (never written) and the inputs earlier
# runs found, OUT/corpus/TARGET (new ones are added there); a crash, leak,
# timeout or sanitizer report stops that target and leaves the input in
# OUT/artifacts/. Prints one line per target (runs, exec/s, cov, ft) and exits
# 1 if any target failed.
set -u
secs=$1
out=$2
shift 2
status=0
mkdir -p "$out/artifacts"
for t in "$@"; do
    bin="$out/fuzz_$t"
    mkdir -p "$out/corpus/$t"
    dict=""
    for d in "fuzz/$t.dict" "fuzz/${t%_text}.dict"; do
        [ -z "$dict" ] && [ -f "$d" ] && dict="-dict=$d"
    done
    max_len=$(sed -n "s/^$t //p" fuzz/max_len.txt)
    log="$out/$t.log"
    # -timeout: one input running longer than 30 s is a hang; -rss_limit_mb: 2 GB
    "$bin" -max_total_time="$secs" -timeout=30 -rss_limit_mb=2048 -max_len="${max_len:-4096}" \
        -print_final_stats=1 -artifact_prefix="$out/artifacts/$t-" $dict \
        "$out/corpus/$t" "fuzz/corpus/$t" >"$log" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
    last=$(grep -E '^#[0-9]+' "$log" | tail -n 1)
    cov=$(echo "$last" | sed -n 's/.*cov: \([0-9]*\).*/\1/p')
    ft=$(echo "$last" | sed -n 's/.*ft: \([0-9]*\).*/\1/p')
    if [ "$rc" -eq 0 ]; then
        echo "ok   fuzz_$t: ${runs:-?} runs in ${secs} s (${speed:-?} exec/s), cov ${cov:-?}, ft ${ft:-?}"
    else
        tail -n 60 "$log"
        echo "FAIL fuzz_$t (exit $rc): see $log; the input is in $out/artifacts/"
        ls -1 "$out/artifacts/" | grep "^$t-" | sed "s|^|     $out/artifacts/|"
        status=1
    fi
done
exit $status
