# shellcheck shell=bash
# device_lib.sh: what the device-side run scripts share (sourced, from the repo root, with OUT set): the carried
# libraries on the loader's path, the forge binary and the GPT-2-tokenized TinyStories in .carry/data, and the
# sampling-speed measurement.
: "${OUT:?set OUT}"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export LD_LIBRARY_PATH="$PWD/.carry/lib:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
FORGE=${FORGE_BIN:-build/cuda/forge}
# shellcheck disable=SC2034 # the sourcing scripts read DATA
DATA=.carry/data/ts-gpt2

# sample_speed CKPT OUTFILE [LABEL]: greedy decoding of 256 new tokens after "Once upon a time", with the KV cache
# (the decode step replayed as a CUDA graph, then launched op by op: --no-graph) and with the full forward pass per
# token; each run's tok/s line (its last on stderr) appended to OUTFILE, the
# text of the last run in $OUT/sample-text-LABEL.txt when LABEL is given. Returns 1 if a run failed.
sample_speed() {
    local ckpt=$1 outfile=$2 label=${3:-} rc=0 mode line
    for mode in "" --no-graph --no-kv-cache; do
        line=$("$FORGE" sample --device cuda --ckpt "$ckpt" --prompt "Once upon a time" --tokens 256 \
            --temperature 0 $mode 2>&1 >/tmp/forge-sample-text.txt | tail -n 1) || rc=1
        echo "${label:+$label }${mode:-kv-cache}: $line" | tee -a "$outfile"
    done
    [ -n "$label" ] && head -c 600 /tmp/forge-sample-text.txt >"$OUT/sample-text-$label.txt"
    return $rc
}
