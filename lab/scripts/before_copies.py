#!/usr/bin/env python3
"""before_copies.py fwd|bwd REV (lab; repo root): forge's flash kernels as of REV copied into lab/flash/before/ for
the interleaved A/B benches that time forge against its own past (patches in lab/results/2026-12-04_s29):
- fwd: the two wgmma forwards, for `forge-lab bench flash16-fwd-ab` (fwd_ab_bench.patch.gz; the copies go into
  namespace fwb in lab/flash/flash16_fwd_before.cu);
- bwd: the fused backward with its entry steps, for `forge-lab bench flash16-bwd-ab` (bwd_ab_bench.patch.gz;
  namespace fbb in lab/flash/flash16_bwd_before.cu).
Each copy has its includes blanked (the lab file includes what they need, once, outside the namespace), its header
guard renamed and, for a .cu, its extern "C" entry points cut off. Apply the patch, then run this with the revision
the A/B should measure against."""
import re
import subprocess
import sys

SRC = "src/backend/cuda/"
OUT = "lab/flash/before/"


def show(rev, name):
    return subprocess.check_output(["git", "show", f"{rev}:{SRC}{name}"]).decode()


def strip(text, guard=None, lab_guard=None):
    """the includes (and the extern "C" block around forge's C header) blanked, the header guard renamed"""
    text = re.sub(r'extern "C" \{\n#include "flash_attention_bf16.h"\n\}\n', "\n", text)
    text = "\n".join("" if line.startswith("#include") else line for line in text.split("\n"))
    return text.replace(guard, lab_guard) if guard else text


def header(rev, name, guard, lab_guard):
    """a copy of header `name` as of rev, guard renamed"""
    write(name, f"/* forge's {name} as of {rev} (includes stripped: the lab file that includes this includes them) */",
          strip(show(rev, name), guard, lab_guard))


def source(rev, name, out, first_entry=None):
    """a copy of source `name` as of rev without its includes and, from first_entry on, its entry points"""
    text = strip(show(rev, name))
    if first_entry:
        text = text[: text.index(first_entry)]
    write(out, f"/* forge's {name} as of {rev} without its includes"
          + (" and entry points */" if first_entry else " */"), text)


def write(name, head, text):
    with open(OUT + name, "w") as f:
        f.write(head + "\n" + text)


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("fwd", "bwd"):
        sys.exit("usage: lab/scripts/before_copies.py fwd|bwd REV")
    kind, rev = sys.argv[1], sys.argv[2]
    if kind == "fwd":
        header(rev, "flash_attention_bf16_wgmma_fwd.cuh", "FORGE_FLASH_ATTENTION_BF16_WGMMA_FWD_CUH",
               "LAB_FWB_FWD_CUH")
        header(rev, "flash_attention_bf16_wgmma_fwd_sched.cuh", "FORGE_FLASH_ATTENTION_BF16_WGMMA_FWD_SCHED_CUH",
               "LAB_FWB_FWD_SCHED_CUH")
        source(rev, "flash_attention_bf16_wgmma.cu", "fwd64.inc",
               'extern "C" forge_status forge_flash_bf16_forward_wgmma(')
    else:
        header(rev, "flash_attention_bf16_wgmma_bwd.cuh", "FORGE_FLASH_ATTENTION_BF16_WGMMA_BWD_CUH",
               "LAB_FBB_BWD_CUH")
        header(rev, "flash_attention_bf16_wgmma_bwd_fused.cuh", "FORGE_FLASH_ATTENTION_BF16_WGMMA_BWD_FUSED_CUH",
               "LAB_FBB_BWD_FUSED_CUH")
        source(rev, "flash_attention_bf16_wgmma_bwd_fused.cu", "bwd_fused.inc")
        source(rev, "flash_attention_bf16_wgmma_bwd.cu", "bwd.inc",
               'extern "C" forge_status forge_flash_bf16_backward_wgmma(')


main()
