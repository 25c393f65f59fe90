"""How the golden backend asks the C heap (glibc's malloc, which torch's CPU tensors live in) to hold memory.

Two calls, both no-ops away from glibc:

* :func:`release_free_memory` (``malloc_trim``): after a device's weights are built, hand the free holes
  between them back to the system, so that the process's peak stays near what it holds.
* :func:`keep_freed_memory` (``mallopt``): from then on, keep what a run frees for the next allocation
  instead of returning it. A golden run frees and allocates activations of a few MB each, op after op;
  glibc's defaults give such a block back to the system when it is freed (its dynamic mmap threshold
  and top-of-heap trimming), so every allocation touched fresh pages again, and the kernel's page faults
  cost more than the math: BERT-Large seq 384 took 570k faults (2.3 GB) per run on the same weights, and
  a run went from 2.9-3.4 s to 2.3-2.5 s once freed memory was kept (its first run 10.5 -> 6.6 s), with
  the same peak. Blocks above 32 MiB (glibc's ceiling for the mmap threshold) are still mapped per use.
  ``PYBUDA_GOLDEN_KEEP_HEAP=0`` leaves glibc's defaults alone.
"""

from __future__ import annotations

import ctypes
from typing import Optional

from pybuda.config import read_env

#: mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: The largest mmap threshold glibc accepts on 64-bit (HEAP_MAX_SIZE / 2).
MMAP_THRESHOLD_BYTES = 32 << 20
#: Free memory at the top of the heap before glibc gives it back (mallopt takes an int: 2 GiB at most).
TRIM_THRESHOLD_BYTES = 2**31 - 1

_libc: Optional[ctypes.CDLL] = None
_libc_tried = False
_kept = False


def _glibc() -> Optional[ctypes.CDLL]:
    """The process's C library when it is glibc (it has ``malloc_trim`` and ``mallopt``), else None."""
    global _libc, _libc_tried
    if not _libc_tried:
        _libc_tried = True
        try:
            libc = ctypes.CDLL(None)
            libc.malloc_trim.argtypes = [ctypes.c_size_t]
            libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
            _libc = libc
        except (OSError, AttributeError):
            _libc = None
    return _libc


def release_free_memory() -> None:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``; nothing elsewhere).

    Building a device's weights allocates each weight's temporaries (layout, rounding) between the
    long-lived queue tensors; glibc serves allocations of that size from its heap, and the freed holes
    between live tensors stay resident. Trimming now and then keeps the process's peak near what it
    holds (BERT-base: 1.38 GB -> 1.0 GB)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


def keep_freed_memory() -> bool:
    """Have glibc keep freed blocks of up to 32 MiB for reuse (see the module docstring); once per process,
    unless ``PYBUDA_GOLDEN_KEEP_HEAP=0``. Returns whether the setting is in effect."""
    global _kept
    if _kept:
        return True
    libc = _glibc()
    if libc is None or not read_env().golden_keep_heap:
        return False
    # mallopt returns 1 on success; a fixed threshold also turns off glibc's dynamic one.
    _kept = bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and \
        bool(libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
    return _kept
