"""Converters for complex tensors: discrete Fourier transforms of static size as matmuls with constant
cosine and sine matrices, and the ops that turn their results back into real tensors.

The chip computes in real formats, so a complex value is a pair of real tensors (:class:`Complex`). A transform
along a dim of length ``n`` multiplies by ``W[k, t] = exp(-+ 2 pi i k t / n) = C - + i S`` (C, S the cosine and
sine matrices): ``re' = re C^T +- im S^T``, ``im' = im C^T -+ re S^T``, each a matmul with a constant the host
computes in float64 once. The normalisation (``backward``/``ortho``/``forward``) is folded into the constants,
and a length ``n`` other than the dim's truncates the input or pads it with zeros (columns of W dropped).
FNet's token mixing (``torch.fft.fftn(x, dim=(1, 2)).real``) becomes four matmuls on the device. Any other use of
a complex value (a complex multiply, a complex model output) is unsupported there: it runs on the CPU, and
:func:`pybuda.frontend.fallback.partition` keeps complex values from crossing between host and device.
"""

from __future__ import annotations

import math
from typing import Any, List, Optional, Sequence

import torch

from pybuda.frontend.aten_builder import Builder, Complex, Const, RealView, Unsupported, converts, _norm_dim
from pybuda.frontend.aten_shape import _permute_by
from pybuda.frontend.fx_program import op_name

#: ATen's normalisation codes in ``_fft_*`` (``fft_norm_mode``): none, 1/sqrt(n), 1/n.
_NORM_CODES = {0: "none", 1: "sqrt", 2: "n"}


def _scale(mode: str, n: int) -> float:
    return 1.0 if mode == "none" else 1.0 / math.sqrt(n) if mode == "sqrt" else 1.0 / n


def _norm_mode(norm: Optional[str], inverse: bool) -> str:
    """The public ``norm`` argument of ``torch.fft.*`` as none / sqrt / n for the direction."""
    norm = norm or "backward"
    if norm not in ("backward", "ortho", "forward"):
        raise Unsupported(f"FFT normalisation {norm!r}")
    if norm == "ortho":
        return "sqrt"
    return "n" if (norm == "backward") == inverse else "none"


def as_complex(b: Builder, x: Any) -> Complex:
    """``x`` (a real tensor or a Complex) as a Complex."""
    if isinstance(x, Complex):
        return x
    if isinstance(x, RealView):
        raise Unsupported("complex view of a view_as_real result")
    if not b.is_tensor(x):
        raise Unsupported("FFT of a non-tensor")
    if not b.dtype(x).is_floating_point:
        x = b.cast(x, torch.float32)
    return Complex(b.tensor(x), None)


def _along_last(b: Builder, v: str, dim: int, matrix: torch.Tensor, name: str) -> str:
    """``v`` with dim ``dim`` multiplied by ``matrix`` ([out, in]): a matmul on the last dim."""
    rank = b.rank(v)
    order = list(range(rank))
    order[dim], order[-1] = order[-1], order[dim]
    moved = _permute_by(b, v, order)
    const = b.const(matrix.t().contiguous().to(b.dtype(moved)), name)
    out = b.op("matmul", [moved, const])
    return _permute_by(b, out, order)


def _fit(b: Builder, v: Any, dim: int, used: int) -> Any:
    """The leading ``used`` positions of ``dim`` (a truncating FFT length)."""
    if v is None or b.shape(v)[dim] == used:
        return v
    return b.op("index", [v], dim=dim, start=0, stop=used, stride=1)


def dft(b: Builder, x: Complex, dim: int, n: int, inverse: bool, mode: str, onesided: bool = False) -> Complex:
    """The DFT of ``x`` along ``dim`` at length ``n`` (``onesided``: only the first n // 2 + 1 outputs)."""
    size = b.shape(x.re)[dim]
    used = min(size, n)
    outputs = n // 2 + 1 if onesided else n
    k = torch.arange(outputs, dtype=torch.float64).reshape(-1, 1)
    t = torch.arange(used, dtype=torch.float64).reshape(1, -1)
    angle = 2 * math.pi * ((k * t) % n) / n  # reduced mod n: exact angles for large k * t
    scale = _scale(mode, n)
    cos, sin = torch.cos(angle) * scale, torch.sin(angle) * scale
    name = b.node.name if b.node is not None else "dft"
    re, im = _fit(b, x.re, dim, used), _fit(b, x.im, dim, used)
    sign = 1.0 if inverse else -1.0  # W = C + sign * i S
    re_c = _along_last(b, re, dim, cos, f"{name}.cos")
    im_from_re = _along_last(b, re, dim, sign * sin, f"{name}.sin")
    if im is None:
        return Complex(re_c, im_from_re)
    im_c = _along_last(b, im, dim, cos, f"{name}.cos")
    re_from_im = _along_last(b, im, dim, -sign * sin, f"{name}.sin")
    return Complex(b.op("add", [re_c, re_from_im]), b.op("add", [im_c, im_from_re]))


def real_from_onesided(b: Builder, x: Complex, dim: int, n: int, mode: str) -> str:
    """The real inverse DFT of a one-sided (Hermitian) spectrum ``x`` along ``dim``, of length ``n``."""
    size = b.shape(x.re)[dim]
    used = min(size, n // 2 + 1)
    t = torch.arange(n, dtype=torch.float64).reshape(-1, 1)
    k = torch.arange(used, dtype=torch.float64).reshape(1, -1)
    weight = torch.full((1, used), 2.0, dtype=torch.float64)
    weight[0, 0] = 1.0
    if n % 2 == 0 and used == n // 2 + 1:
        weight[0, -1] = 1.0
    angle = 2 * math.pi * ((k * t) % n) / n
    scale = _scale(mode, n) * weight
    name = b.node.name if b.node is not None else "irfft"
    out = _along_last(b, _fit(b, x.re, dim, used), dim, torch.cos(angle) * scale, f"{name}.cos")
    if x.im is None:
        return out
    # Im of the k = 0 (and n / 2) terms is ignored, as torch does: sin is 0 there.
    im = _along_last(b, _fit(b, x.im, dim, used), dim, -torch.sin(angle) * scale, f"{name}.sin")
    return b.op("add", [out, im])


def _dims_of(b: Builder, v: Any, dims: Any, count_default: Optional[int] = None) -> List[int]:
    rank = b.rank(v.re if isinstance(v, Complex) else v)
    if dims is None:
        dims = list(range(rank)) if count_default is None else list(range(rank - count_default, rank))
    elif isinstance(dims, int):
        dims = [dims]
    return [_norm_dim(int(d), rank) for d in dims]


def _lengths(b: Builder, v: Any, dims: Sequence[int], s: Any) -> List[int]:
    shape = b.shape(v.re if isinstance(v, Complex) else v)
    if s is None:
        return [shape[d] for d in dims]
    s = [int(x) for x in (s if isinstance(s, (list, tuple)) else [s])]
    if len(s) != len(dims):
        raise Unsupported("FFT lengths and dims differ in number")
    return [shape[d] if x == -1 else x for x, d in zip(s, dims)]


@converts("fft_fft", "fft_ifft", "fft_fftn", "fft_ifftn", "fft_fft2", "fft_ifft2")
def _fft(b: Builder, n, p):
    name = op_name(n.target)
    inverse = name.startswith("fft_i")
    x = as_complex(b, p["self"])
    if name in ("fft_fft", "fft_ifft"):
        dims = _dims_of(b, x, p.get("dim", -1))
        lengths = _lengths(b, x, dims, p.get("n"))
    else:
        default = 2 if name.endswith("2") else None
        s = p.get("s")
        dims = _dims_of(b, x, p.get("dim"), default if s is None else len(s))
        lengths = _lengths(b, x, dims, s)
    mode = _norm_mode(p.get("norm"), inverse)
    for d, length in zip(dims, lengths):
        x = dft(b, x, d, length, inverse, mode)
    return x


@converts("fft_rfft", "fft_irfft")
def _rfft(b: Builder, n, p):
    x = p["self"]
    inverse = op_name(n.target) == "fft_irfft"
    dim = _dims_of(b, x, p.get("dim", -1))[0]
    mode = _norm_mode(p.get("norm"), inverse)
    if not inverse:
        if isinstance(x, Complex):
            raise Unsupported("rfft of a complex tensor")
        length = _lengths(b, x, [dim], p.get("n"))[0]
        return dft(b, as_complex(b, x), dim, length, False, mode, onesided=True)
    x = as_complex(b, x)
    length = p.get("n") or 2 * (b.shape(x.re)[dim] - 1)
    return real_from_onesided(b, x, dim, int(length), mode)


@converts("_fft_c2c")
def _fft_c2c(b: Builder, n, p):
    x = as_complex(b, p["self"])
    dims = _dims_of(b, x, list(p["dim"]))
    shape = b.shape(x.re)
    inverse = not p["forward"]
    mode = _NORM_CODES[int(p["normalization"])]
    total = math.prod(shape[d] for d in dims)
    # ATen scales by the product of the transformed lengths.
    for d in dims:
        x = dft(b, x, d, shape[d], inverse, "none")
    return _scaled(b, x, _scale(mode, total))


@converts("_fft_r2c")
def _fft_r2c(b: Builder, n, p):
    x = p["self"]
    if isinstance(x, Complex):
        raise Unsupported("r2c FFT of a complex tensor")
    dims = _dims_of(b, x, list(p["dim"]))
    shape = b.shape(x)
    mode = _NORM_CODES[int(p["normalization"])]
    total = math.prod(shape[d] for d in dims)
    onesided = bool(p["onesided"])
    v = as_complex(b, x)
    # The last dim is the one-sided one; the others are full transforms of the result.
    v = dft(b, v, dims[-1], shape[dims[-1]], False, "none", onesided=onesided)
    for d in dims[:-1]:
        v = dft(b, v, d, shape[d], False, "none")
    return _scaled(b, v, _scale(mode, total))


@converts("_fft_c2r")
def _fft_c2r(b: Builder, n, p):
    x = as_complex(b, p["self"])
    dims = _dims_of(b, x, list(p["dim"]))
    shape = b.shape(x.re)
    last = int(p["last_dim_size"])
    mode = _NORM_CODES[int(p["normalization"])]
    total = math.prod(shape[d] for d in dims[:-1]) * last
    for d in dims[:-1]:
        x = dft(b, x, d, shape[d], True, "none")
    out = real_from_onesided(b, x, dims[-1], last, "none")
    scale = _scale(mode, total)
    return out if scale == 1.0 else b.binary("multiply", out, scale, b.dtype(out))


def _scaled(b: Builder, x: Complex, scale: float) -> Complex:
    if scale == 1.0:
        return x
    dt = b.dtype(x.re)
    return Complex(b.binary("multiply", x.re, scale, dt),
                   None if x.im is None else b.binary("multiply", x.im, scale, dt))


@converts("view_as_real")
def _view_as_real(b: Builder, n, p):
    x = p["self"]
    if not isinstance(x, Complex):
        raise Unsupported("view_as_real of a tensor that is not complex")
    return RealView(x)


@converts("real", "imag")
def _real_imag(b: Builder, n, p):
    x = p["self"]
    if not isinstance(x, Complex):
        if op_name(n.target) == "real" and b.is_tensor(x):
            return b.tensor(x)
        raise Unsupported("imag of a real tensor")
    return b.tensor(x.re) if op_name(n.target) == "real" else b.imaginary(x)


__all__ = ["Complex", "Const", "as_complex", "dft", "real_from_onesided"]
