"""bf16 rounding shared by the numpy kernel emulators (lab/emulators/emulate_flash16*.py)."""
import numpy as np


def round_bf16(x):
    """round to bf16, nearest even (as __floats2bfloat162_rn / the kernels' packs), returned as float64"""
    a = np.asarray(x, dtype=np.float32)
    u = a.view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32).astype(np.float64)
