"""Native kernels of the golden backend: the few elementwise passes where torch's one-op-at-a-time
execution costs more than the math (BFP rounding walks a tensor eight times in torch, once here).

Each kernel is plain C (beside this file), built on first use with the system C compiler into a
per-user cache, and loaded with ctypes. Everything here is optional: without a compiler, when the
build fails, or with ``PYBUDA_GOLDEN_NATIVE=0`` (read once, at the first use), :func:`available`
is False and the caller runs the torch path, which computes the same numbers (``tests/golden`` checks both, bit for bit).

The call releases the GIL (ctypes does), so a large tensor is split across a few Python threads,
one per torch intra-op thread: the work is the same, the wall time is shared.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

import torch

from pybuda.config import read_env

log = logging.getLogger(__name__)

_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bfp.c")
# Exact IEEE single precision: no fast-math, no contraction into FMAs (the rounding trick needs the
# add and the subtract as two roundings).
_FLAGS = ["-O2", "-fPIC", "-shared", "-std=c99", "-ffp-contract=off", "-fno-fast-math"]
# The build machine's vector units (AVX2 on x86); a compiler that does not know the flag builds without.
_NATIVE_FLAGS = ["-march=native"]
_BLOCK = 16
#: Blocks below which one thread does the whole tensor: one thread rounds about 4 datums a
#: nanosecond, and handing work to another costs tens of microseconds (measured: 393k datums take
#: 87 us on one thread, 126 us on two; 3.1M take 725 us on one, 442 us on two).
PARALLEL_MIN_BLOCKS = 1 << 16

_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
_tried = False
_pool: Optional[ThreadPoolExecutor] = None


#: Whether the native kernels are used: None until the first use reads ``PYBUDA_GOLDEN_NATIVE`` (once per
#: process); tests set it to compare both paths.
enabled: Optional[bool] = None


def _enabled() -> bool:
    global enabled
    if enabled is None:
        enabled = read_env().golden_native
    return enabled


def _build(path: str, compiler: str) -> None:
    """Compile to a temporary name and rename: concurrent builders (test workers) never load a
    half-written library."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=os.path.dirname(path))
    os.close(fd)
    try:
        for extra in (_NATIVE_FLAGS, []):
            done = subprocess.run([compiler, *_FLAGS, *extra, "-o", tmp, _SOURCE, "-lm"], capture_output=True,
                                  timeout=120)
            if done.returncode == 0:
                break
        else:
            raise OSError(f"{compiler} failed: {done.stderr.decode(errors='replace').strip()[-500:]}")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _machine_key() -> bytes:
    """What the library depends on besides its source: the compiler, the flags, and the CPU (the build
    uses -march=native, so a cache shared between machines keeps one library per kind of CPU)."""
    cpu = platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu += next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        pass
    return " ".join([*_FLAGS, *_NATIVE_FLAGS, cpu]).encode()


def _load() -> Optional[ctypes.CDLL]:
    """The built library, or None (logged at debug level) when it cannot be had."""
    global _lib, _tried
    if _tried:
        return _lib
    with _lock:
        if _tried:
            return _lib
        _tried = True
        compiler = shutil.which("cc") or shutil.which("gcc")
        if compiler is None or sys.byteorder != "little":
            log.debug("golden native kernels: no C compiler; using torch")
            return None
        with open(_SOURCE, "rb") as f:
            key = hashlib.sha256(f.read() + compiler.encode() + _machine_key()).hexdigest()[:16]
        path = os.path.join(read_env().cache_dir, "native", f"bfp-{key}.so")
        try:
            if not os.path.exists(path):
                _build(path, compiler)
            lib = ctypes.CDLL(path)
        except (OSError, subprocess.SubprocessError) as exc:
            log.debug("golden native kernels unavailable (%s); using torch", exc)
            return None
        lib.bfp_round.restype = None
        lib.bfp_round.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_int,
                                  ctypes.c_int]
        _lib = lib
        return lib


def available() -> bool:
    """True when the native kernels are enabled and built (the build runs once, at the first call)."""
    return _enabled() and _load() is not None


def _forget_pool() -> None:
    # A forked child inherits the pool object but not its threads: work handed to it would never run.
    global _pool
    _pool = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def _workers() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=max(1, torch.get_num_threads()), thread_name_prefix="golden-native")
    return _pool


def bfp_round(x: torch.Tensor, out: torch.Tensor, man_bits: int, family_a: bool, truncate: bool) -> None:
    """Round the blocks of contiguous float32 ``x`` (a multiple of 16 datums) into contiguous float32
    ``out`` (which may be ``x``), as ``formats.quantize`` does for a BFP format. Only when
    :func:`available`: the caller asks first (and takes the torch path otherwise)."""
    lib = _lib
    nblocks = x.numel() // _BLOCK
    xp, op = x.data_ptr(), out.data_ptr()
    args = (man_bits, int(family_a), int(truncate))
    threads = max(1, torch.get_num_threads())
    if threads == 1 or nblocks < PARALLEL_MIN_BLOCKS:
        lib.bfp_round(xp, op, nblocks, *args)
        return
    step = -(-nblocks // threads)
    # The first share runs here, the others on the pool's threads.
    jobs = [_workers().submit(lib.bfp_round, xp + s * _BLOCK * 4, op + s * _BLOCK * 4, min(step, nblocks - s), *args)
            for s in range(step, nblocks, step)]
    lib.bfp_round(xp, op, min(step, nblocks), *args)
    for job in jobs:
        job.result()
