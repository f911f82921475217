#!/bin/sh
# fuzz/coverage.sh COVOUT FOUND TARGET...: line and region coverage of each
# parser over its corpora (`make fuzz-coverage` calls this). COVOUT/fuzz_TARGET
# is the target built with clang's source-based coverage; it runs every input
# of fuzz/corpus/TARGET and FOUND/TARGET once (-runs=0), and llvm-cov reports
# the source files that target exercises, per file and per function
# (COVOUT/TARGET.functions.txt). File totals include functions no target calls
# (writers, file I/O), listed there with 0 executions; the "reached functions"
# line leaves those out.
set -u
cov=$1
found=$2
shift 2
profdata=$(command -v llvm-profdata || command -v llvm-profdata-14)
llvmcov=$(command -v llvm-cov || command -v llvm-cov-14)
[ -n "$profdata" ] && [ -n "$llvmcov" ] || { echo "fuzz/coverage.sh: needs llvm-profdata and llvm-cov (apt-get install llvm)"; exit 1; }
for t in "$@"; do
    case $t in
    config) src="src/model/config.c" ;;
    safetensors) src="src/model/safetensors.c" ;;
    shard) src="src/data/shards.c" ;;
    tokenizer) src="src/data/tokenizer.c src/data/tokenizer_encode.c src/data/tokenizer_map.c" ;;
    tokenizer_text) src="src/data/tokenizer_encode.c src/data/tokenizer_map.c" ;;
    *) src="" ;;
    esac
    mkdir -p "$found/$t"
    n=$(ls "fuzz/corpus/$t" "$found/$t" | grep -vc ':$')
    rm -f "$cov/$t.profraw"
    LLVM_PROFILE_FILE="$cov/$t.profraw" "$cov/fuzz_$t" -runs=0 "fuzz/corpus/$t" "$found/$t" >"$cov/$t.run.log" 2>&1 \
        || { tail -n 20 "$cov/$t.run.log"; exit 1; }
    "$profdata" merge -sparse -o "$cov/$t.profdata" "$cov/$t.profraw"
    echo "== fuzz_$t: $n corpus inputs"
    # shellcheck disable=SC2086
    "$llvmcov" report "$cov/fuzz_$t" -instr-profile="$cov/$t.profdata" $src | sed -n '1p;3,$p'
    # shellcheck disable=SC2086
    "$llvmcov" report "$cov/fuzz_$t" -instr-profile="$cov/$t.profdata" -show-functions $src >"$cov/$t.functions.txt"
    # the same, over the functions this target reaches at all (region cover > 0):
    # the parse paths, without the writers and file I/O no fuzz input can reach
    awk '$1 != "TOTAL" && $1 ~ /^[A-Za-z_][A-Za-z_0-9.:]*$/ && $4 ~ /%$/ && $4 != "0.00%" {
            nf++; lines += $5; lmiss += $6; br += $8; bmiss += $9 }
        END { printf "   reached functions: %d; lines %d/%d (%.1f%%), branches %d/%d (%.1f%%)\n",
              nf, lines - lmiss, lines, 100 * (lines - lmiss) / lines, br - bmiss, br, 100 * (br - bmiss) / br }' \
        "$cov/$t.functions.txt"
done
