#!/usr/bin/env bash
# device_variants.sh: one device call for a tree and its variants (run on the GPU machine from the repo root, OUT
# set). First scripts/device_run.sh with FORGE_STAGES (default s17; its checks from FORGE_S17_CHECKS etc. as
# device_s17.sh documents) with the tree's binaries from .carry/bin; then, for each name in VARS, the same
# `forge-lab bench` entries (FORGE_S17_LABBENCH, ';'-separated) with .carry/v/NAME/forge-lab.gz: a forge-lab built
# from the tree with one source file compiled differently (the build machine: compile that .o with the variant's
# flags, `ar r` it into a copy of build/cuda/libforge.a, relink forge-lab with `make -n -B build/cuda/forge-lab`'s
# link line, strip, gzip). device_run.sh empties $OUT, so its archive is kept aside and put back as logs1.tgz;
# var.log holds the variants' lines (the last two of each bench; var-NAME-I.log the whole output of entry I).
set -u
O=${OUT:?set OUT}
FORGE_STAGES=${FORGE_STAGES:-s17} bash scripts/device_run.sh >/tmp/run.log 2>&1
cp "$O/logs.tgz" /tmp/logs1.tgz 2>/dev/null
tail -n 25 /tmp/run.log
export LD_LIBRARY_PATH="$PWD/.carry/lib:/usr/local/cuda/lib64"
for v in ${VARS:-}; do
    gunzip -c ".carry/v/$v/forge-lab.gz" >"/tmp/fl-$v" && chmod +x "/tmp/fl-$v"
    IFS=';' read -ra E <<<"${FORGE_S17_LABBENCH:-}"
    for i in "${!E[@]}"; do
        echo "== $v: ${E[$i]}"
        # shellcheck disable=SC2086
        "/tmp/fl-$v" bench ${E[$i]} >"/tmp/var-$v-$i.log" 2>&1
        tail -n 2 "/tmp/var-$v-$i.log"
    done
done 2>&1 | tee /tmp/var.log
mkdir -p "$O"
cp /tmp/logs1.tgz "$O/logs1.tgz" 2>/dev/null
cp /tmp/var.log /tmp/run.log /tmp/var-*.log "$O/" 2>/dev/null
