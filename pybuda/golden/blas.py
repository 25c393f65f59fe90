"""Float32 matrix products for the golden device: rows times one matrix through oneDNN where it is faster.

Almost every product the golden computes is run-time rows times one matrix: a weight (or a fidelity
piece of it), or a constant the compiler made. PyTorch eager sends ``x @ w`` to its BLAS (MKL in the
x86 wheels), whose kernels on an AMD CPU are its generic ones; oneDNN, which the same wheel carries for
``torch.nn.Linear``'s CPU fast paths (``torch.ops.mkldnn._linear_pointwise``, TorchInductor's CPU
linear), picks the CPU's widest vector unit. On BERT-base's 72 weight GEMMs at sequence 128 (2 threads,
AMD EPYC with AVX-512) it took 109–119 ms where ``torch.matmul`` took 143–163 ms. No copy or repacking
of the weight is made: oneDNN reads it where it is, in either layout.

Both are float32 GEMMs with float32 accumulation; only the order of the additions (each library's own
choice) differs, and every product of the golden's masked fidelity pieces is exact. A row's result does
not depend on how many rows are multiplied together or on the thread count (checked when this module
was written: microbatch 1 and 8 give a sample the same bits). Zeros, infinities, NaN and subnormals go
through as in ``torch.matmul``.

Where the PyTorch build has no oneDNN (the probe in :func:`available` fails), :func:`matmul` is
``torch.matmul``.
"""

from __future__ import annotations

from typing import Optional

import torch

__all__ = ["available", "matmul"]

#: Smallest matrix (K x C elements) sent to oneDNN: below it a call's fixed cost outweighs the kernel.
MIN_ELEMENTS = 32 * 32

_available: Optional[bool] = None


def available() -> bool:
    """Whether oneDNN's linear runs in this PyTorch build (probed once on a small product)."""
    global _available
    if _available is None:
        try:
            out = torch.ops.mkldnn._linear_pointwise(torch.ones(2, 32), torch.ones(32, 32), None, "none", [], "")
            _available = bool(torch.backends.mkldnn.is_available()) and bool(torch.equal(out, torch.full((2, 32), 32.0)))
        except (AttributeError, RuntimeError, NotImplementedError):
            _available = False
    return _available


def matmul(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``torch.matmul(x, w)``. When ``w`` is one float32 matrix ``[K, C]`` (leading dims of size 1 allowed,
    no more of them than ``x`` has) and ``x`` float32 ``[..., M, K]``, it runs as oneDNN's linear."""
    if (x.dtype != torch.float32 or w.dtype != torch.float32 or x.dim() < 2 or w.dim() < 2
            or x.dim() < w.dim() or w.shape[-1] * w.shape[-2] < MIN_ELEMENTS or x.shape[-1] != w.shape[-2]
            or any(d != 1 for d in w.shape[:-2]) or not available()):
        return torch.matmul(x, w)
    # linear takes the weight as torch.nn.Linear stores it, [out features, in features]: w transposed (a view)
    return torch.ops.mkldnn._linear_pointwise(x, w.reshape(w.shape[-2], w.shape[-1]).t(), None, "none", [], "")
