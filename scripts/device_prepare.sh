#!/usr/bin/env bash
# device_prepare.sh: on the build machine, everything a device call carries (the device has no package
# manager and no ../shared) in .carry/: the CUDA binaries and the lab built for any recent x86-64
# (ARCH=x86-64-v3), stripped and gzipped in .carry/bin (a call carries at most 64 MiB; device_run.sh
# unpacks them into build/cuda), libcjson from Debian in .carry/lib, and TinyStories (../shared/data)
# tokenized with an 8192-id BPE vocabulary in .carry/data/ts8192 (gpt-10m's vocab_size), and the sanitizer
# build (.carry/bin-san, unpacked into build/cuda-san). Then call the
# device with carry = [.carry] and run scripts/device_run.sh there.
set -eu
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/cuda/bin"
make -j2 cuda lab ARCH=x86-64-v3 >/tmp/forge-device-prepare-build.log 2>&1 ||
    { tail -n 30 /tmp/forge-device-prepare-build.log; exit 1; }
mkdir -p .carry/lib .carry/deb
if [ ! -e .carry/lib/libcjson.so.1 ]; then
    (cd .carry/deb && apt-get download libcjson1 >/dev/null)
    for d in .carry/deb/*.deb; do dpkg -x "$d" .carry/deb/x; done
    cp -a .carry/deb/x/usr/lib/x86_64-linux-gnu/libcjson.so.1* .carry/lib/
fi
DATA=../shared/data/tinystories
if [ ! -e .carry/data/ts8192/train_000.bin ]; then
    mkdir -p .carry/data/ts8192
    build/forge tokenizer train --vocab 8192 --out .carry/data/ts8192 "$DATA/train.txt" >/dev/null
    build/forge tokenize --tokenizer .carry/data/ts8192 --out .carry/data/ts8192 "$DATA/train.txt" "$DATA/valid.txt"
fi
# the sanitizer build (scripts/device_sanitize.sh): a 120 s mbarrier-wait trap for racecheck
make -j2 BUILD=build-san EXTRA_NVFLAGS=-DWGMMA_WAIT_TIMEOUT_NS=120000000000ull ARCH=x86-64-v3 \
    build-san/cuda/forge build-san/cuda/forge_gpu_tests >/tmp/forge-device-prepare-san.log 2>&1 ||
    { tail -n 30 /tmp/forge-device-prepare-san.log; exit 1; }
mkdir -p .carry/bin .carry/bin-san
for b in forge forge_gpu_tests forge_tests forge-lab; do
    strip -o ".carry/bin/$b" "build/cuda/$b"
    gzip -f ".carry/bin/$b"
done
for b in forge forge_gpu_tests; do
    strip -o ".carry/bin-san/$b" "build-san/cuda/$b"
    gzip -f ".carry/bin-san/$b"
done
du -sh .carry/*
