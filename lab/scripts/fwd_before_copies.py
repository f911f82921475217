#!/usr/bin/env python3
"""fwd_before_copies.py REV (lab; repo root): lab/flash/before/ for `forge-lab bench flash16-fwd-ab`
(fwd_ab_bench.patch.gz in lab/results/2026-12-04_s29): forge's two forward kernels as of REV copied for namespace fwb,
their includes stripped (lab/flash/flash16_fwd_before.cu includes what they need), their header guards renamed and
flash_attention_bf16_wgmma.cu without its entry points. Apply the patch, then run this with the revision the A/B
should measure against (the patch's copies are 7ceef4c's)."""
import re
import subprocess
import sys

REV = sys.argv[1]
SRC = "src/backend/cuda/"
OUT = "lab/flash/before/"


def show(name):
    return subprocess.check_output(["git", "show", f"{REV}:{SRC}{name}"]).decode()


def strip(text, guard=None, lab_guard=None):
    """the includes (and the extern "C" block around forge's C header) blanked, the header guard renamed"""
    text = re.sub(r'extern "C" \{\n#include "flash_attention_bf16.h"\n\}\n', "\n", text)
    text = "\n".join("" if line.startswith("#include") else line for line in text.split("\n"))
    return text.replace(guard, lab_guard) if guard else text


def write(name, head, text):
    with open(OUT + name, "w") as f:
        f.write(head + "\n" + text)


write("flash_attention_bf16_wgmma_fwd.cuh",
      f"/* forge's flash_attention_bf16_wgmma_fwd.cuh as of {REV} (includes stripped: flash16_fwd_before.cu includes them) */",
      strip(show("flash_attention_bf16_wgmma_fwd.cuh"), "FORGE_FLASH_ATTENTION_BF16_WGMMA_FWD_CUH", "LAB_FWB_FWD_CUH"))
write("flash_attention_bf16_wgmma_fwd_sched.cuh",
      f"/* forge's flash_attention_bf16_wgmma_fwd_sched.cuh as of {REV} (includes stripped) */",
      strip(show("flash_attention_bf16_wgmma_fwd_sched.cuh"), "FORGE_FLASH_ATTENTION_BF16_WGMMA_FWD_SCHED_CUH",
            "LAB_FWB_FWD_SCHED_CUH"))
main = strip(show("flash_attention_bf16_wgmma.cu"))
write("fwd64.inc", f"/* forge's flash_attention_bf16_wgmma.cu as of {REV} without its includes and entry points */",
      main[: main.index('extern "C" forge_status forge_flash_bf16_forward_wgmma(')])
