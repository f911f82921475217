#!/usr/bin/env bash
# build_variant.sh NAME SOURCE FLAGS...: (build machine, repo root, after `make cuda lab`) forge-lab with SOURCE (a
# .cu of libforge, e.g. src/backend/cuda/flash_attention_bf16_wgmma.cu, or of the lab, e.g.
# lab/flash/flash16_fwd_1cta.cu) compiled with the tree's nvcc flags plus FLAGS (e.g. -DSOME_PROBE), for
# lab/scripts/device_variants.sh: the object replaces the tree's on the link line (a lab object) or in a copy of
# build/cuda/libforge.a (a libforge one); the binaries of TARGETS (default forge-lab; "forge-lab forge" for `forge
# bench` too) are relinked with make's own link lines, stripped and gzipped into .carry/v/NAME/. The variant's ptxas
# report is printed (registers, spills, serialised wgmma).
set -euo pipefail
name=$1 src=$2
shift 2
d=build/variants/$name
mkdir -p "$d" ".carry/v/$name"
obj=build/cuda/${src%.cu}.o
compile=$(make -n -B "$obj" ARCH=x86-64-v3 2>/dev/null | grep -E "^nvcc .* -c $src " | head -n 1)
[ -n "$compile" ] || { echo "build_variant.sh: no nvcc line for $src in make's plan" >&2; exit 1; }
compile=${compile%% 2>*}                     # the compile itself, without make's report redirection
compile=${compile/ -MMD -MP -MF * -c / -c }   # no dependency file
compile=${compile/-o $obj/-o $d/$(basename "$obj")}
eval "$compile $*" 2>"$d/ptxas.txt"
grep -E "spill|Used|C751" "$d/ptxas.txt" | sort | uniq -c
cp build/cuda/libforge.a "$d/libforge.a"
case $src in lab/*) ;; *) (cd "$d" && ar r libforge.a "$(basename "$obj")") ;; esac
for target in ${TARGETS:-forge-lab}; do
    link=$(make -n -B "build/cuda/$target" ARCH=x86-64-v3 2>/dev/null | grep -- "-o build/cuda/$target\( \|$\)" | tail -n 1)
    [ -n "$link" ] || { echo "build_variant.sh: no link line for $target in make's plan" >&2; exit 1; }
    link=${link//build\/cuda\/libforge.a/$d\/libforge.a}
    link=${link//$obj /$d/$(basename "$obj") }
    link=${link//-o build\/cuda\/$target/-o $d\/$target}
    eval "$link"
    strip -o ".carry/v/$name/$target" "$d/$target"
    gzip -f ".carry/v/$name/$target"
done
ls -la ".carry/v/$name"
