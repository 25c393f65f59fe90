"""Complex arithmetic on the device: a complex tensor is a pair of real tensors (:class:`Complex`), so a complex
multiply is four real multiplies and two adds, and a reshape or a slice moves both parts alike.

This covers the rotary embeddings of Meta's Llama reference code and its descendants::

    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)

(``freqs_cis`` a complex constant from ``torch.polar``), and any other elementwise complex arithmetic between
the FFTs of :mod:`pybuda.frontend.aten_complex`. :func:`convert` is called for every FX node with a complex
operand (a :class:`Complex`, or a complex constant, which it splits into its parts first):

* ops in :data:`COMPLEX_OPS` (``mul``, ``add``, ``sub``, ``div``, ``neg``, ``conj``, ``exp``, matrix products
  ...) compute the parts;
* ops in :data:`PARTWISE` (shape moves, slices, concatenation, sums) run once per part;
* any other op gets its own converter, which either reads a Complex itself (``abs``, ``real``, ``view_as_real``,
  the FFTs) or refuses it, so the op runs on the CPU.

``view_as_complex``, ``polar`` and ``complex`` build a Complex from real tensors.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional

import torch

from pybuda.frontend.aten_builder import Builder, Complex, Const, RealView, Unsupported, out_dtype, out_shape
from pybuda.frontend.aten_builder import converts
from pybuda.frontend.converters import registrar
from pybuda.frontend.fx_program import meta_val, op_name

#: Converters for ATen ops with a complex operand, by overload packet name.
COMPLEX_OPS: Dict[str, Callable[..., Any]] = {}
_complex_op = registrar(COMPLEX_OPS, "complex ATen op")

#: ATen ops that act on the real and the imaginary part alike: moves, slices, joins and linear reductions.
PARTWISE = frozenset({
    "view", "reshape", "_unsafe_view", "unsqueeze", "squeeze", "permute", "transpose", "t", "expand", "expand_as",
    "slice", "select", "narrow", "clone", "contiguous", "alias", "detach", "lift_fresh_copy", "flatten", "unflatten",
    "cat", "stack", "split", "split_with_sizes", "chunk", "unbind", "repeat", "flip", "roll", "movedim",
    "sum", "mean", "index_select", "_to_copy", "to", "view_copy", "permute_copy", "expand_copy", "slice_copy",
    "select_copy", "unsqueeze_copy", "squeeze_copy", "transpose_copy",
})

#: Ops that materialise a lazy conjugate or negation: the pair holds the value itself already.
_IDENTITY = frozenset({"resolve_conj", "resolve_neg"})


def _split_const(v: Any) -> Any:
    """A complex constant as a Complex of real constants; other values unchanged (lists element by element)."""
    if isinstance(v, Const) and v.value.is_complex():
        value = v.value.resolve_conj()
        return Complex(Const(value.real.contiguous(), f"{v.name}.re"), Const(value.imag.contiguous(), f"{v.name}.im"))
    if isinstance(v, complex):
        return Complex(v.real, v.imag)
    if isinstance(v, (list, tuple)):
        return type(v)(_split_const(x) for x in v)
    return v


def convert(b: Builder, n: torch.fx.Node, params: Dict[str, Any], converter: Optional[Callable[..., Any]]) -> Any:
    """The value of FX node ``n`` when an operand is complex, or ``NotImplemented`` when none is (the caller then
    uses ``converter``, the op's own, as for real operands)."""
    params = {k: _split_const(v) for k, v in params.items()}
    name = op_name(n.target)
    if next(_complexes(params.values()), None) is None:
        # a real tensor made complex (out_dtype gives the parts' dtype: the node's own says it is complex)
        if name in ("_to_copy", "to") and meta_val(n).dtype.is_complex and b.is_tensor(params.get("self")):
            return Complex(b.tensor(params["self"], out_dtype(n)), None)
        return NotImplemented
    if name in _IDENTITY:
        return params["self"]
    if name in COMPLEX_OPS:
        return COMPLEX_OPS[name](b, n, params)
    if name in PARTWISE and converter is not None:
        return _partwise(b, n, params, converter)
    if converter is None:
        raise Unsupported("no mapping to a pybuda op")
    return converter(b, n, params)


def _partwise(b: Builder, n: torch.fx.Node, params: Dict[str, Any], converter: Callable[..., Any]) -> Any:
    """``converter`` run on the real parts and on the imaginary parts (skipped where every part is zeros)."""
    dtype = params.get("dtype")
    if isinstance(dtype, torch.dtype) and not dtype.is_complex:
        # A complex tensor cast to a real dtype keeps its real part (torch warns that it discards the rest).
        if op_name(n.target) not in ("_to_copy", "to"):
            raise Unsupported(f"a complex tensor reduced to {dtype}")
        return b.cast(b.tensor(params["self"].re), dtype)

    def part(v: Any, real: bool) -> Any:
        if isinstance(v, Complex):
            return v.re if real else b.imaginary(v)
        if isinstance(v, (list, tuple)):
            return type(v)(part(x, real) for x in v)
        if isinstance(v, torch.dtype) and v.is_complex:
            return v.to_real()
        return v

    re = converter(b, n, {k: part(v, True) for k, v in params.items()})
    if all(c.im is None for c in _complexes(params.values())):
        return _pair(re, None)
    return _pair(re, converter(b, n, {k: part(v, False) for k, v in params.items()}))


def _complexes(values):
    """The Complex values among ``values``, in lists too."""
    for v in values:
        if isinstance(v, Complex):
            yield v
        elif isinstance(v, (list, tuple)):
            yield from _complexes(v)


def _pair(re: Any, im: Any) -> Any:
    """Parts computed separately, paired up again (element by element for ops with several results)."""
    if isinstance(re, (list, tuple)):
        ims = im if im is not None else [None] * len(re)
        return type(re)(Complex(r, i) for r, i in zip(re, ims))
    return Complex(re, im)


# --- arithmetic on parts (None: a part of zeros; numbers stay numbers) -------------------------------------
def _is_zero(v: Any) -> bool:
    return v is None or (isinstance(v, (int, float)) and v == 0)


def _times(b: Builder, x: Any, y: Any, dt: torch.dtype) -> Any:
    if _is_zero(x) or _is_zero(y):
        return None
    if isinstance(x, (int, float)) and isinstance(y, (int, float)):
        return x * y
    return b.binary("multiply", x, y, dt)


def _plus(b: Builder, x: Any, y: Any, dt: torch.dtype, sign: float = 1.0) -> Any:
    """``x + sign * y``."""
    if _is_zero(y):
        return x
    if _is_zero(x):
        return y if sign > 0 else (-y if isinstance(y, (int, float)) else b.negative(y, dt))
    if isinstance(x, (int, float)) and isinstance(y, (int, float)):
        return x + sign * y
    return b.binary("add" if sign > 0 else "subtract", x, y, dt)


def _parts(v: Any) -> tuple:
    if isinstance(v, Complex):
        return v.re, v.im
    if isinstance(v, RealView):
        raise Unsupported("complex arithmetic on a view_as_real result")
    return v, None


def _result(b: Builder, n: torch.fx.Node, re: Any, im: Any, dt: torch.dtype) -> Complex:
    """A Complex of tensors: a part that came out a number (a complex scalar added to a real tensor), or a real
    part of zeros (a real tensor times ``1j``), is filled to the node's shape."""
    def tensor(v: Any) -> Any:
        if b.is_tensor(v):
            return v
        return Const(torch.full(out_shape(n), float(v or 0.0), dtype=dt), f"{n.name}.part")
    return Complex(tensor(re), None if im is None else tensor(im))


@_complex_op("mul")
def _mul(b: Builder, n, p):
    dt = out_dtype(n)
    (xr, xi), (yr, yi) = _parts(p["self"]), _parts(p["other"])
    re = _plus(b, _times(b, xr, yr, dt), _times(b, xi, yi, dt), dt, -1.0)
    im = _plus(b, _times(b, xr, yi, dt), _times(b, xi, yr, dt), dt)
    return _result(b, n, re, im, dt)


@_complex_op("mm", "bmm", "matmul")
def _matrix_product(b: Builder, n, p):
    """``(Xr + i Xi)(Yr + i Yi) = (Xr Yr - Xi Yi) + i (Xr Yi + Xi Yr)``: up to four real matrix products (an
    einsum of complex tensors becomes a ``bmm``; S4D's kernel, a complex Vandermonde product)."""
    from pybuda.frontend.aten_nn import _matmul

    dt = out_dtype(n)
    (xr, xi), (yr, yi) = _parts(p["self"]), _parts(p.get("mat2", p.get("other")))
    shape = out_shape(n)

    def product(x: Any, y: Any) -> Any:
        if _is_zero(x) or _is_zero(y):
            return None
        return _matmul(b, b.tensor(x, dt), b.tensor(y, dt), None, shape, dt)

    re = _plus(b, product(xr, yr), product(xi, yi), dt, -1.0)
    im = _plus(b, product(xr, yi), product(xi, yr), dt)
    return _result(b, n, re, im, dt)


@_complex_op("add", "sub", "rsub")
def _add_sub(b: Builder, n, p):
    dt = out_dtype(n)
    x, y = p["self"], p["other"]
    if op_name(n.target) == "rsub":
        x, y = y, x
    alpha = p.get("alpha", 1)
    if alpha is None:
        alpha = 1
    if isinstance(alpha, (complex, Complex)):
        raise Unsupported("a complex alpha")
    sign = -1.0 if op_name(n.target) in ("sub", "rsub") else 1.0
    (xr, xi), (yr, yi) = _parts(x), _parts(y)
    if alpha != 1:
        yr, yi = _times(b, yr, alpha, dt), _times(b, yi, alpha, dt)
    return _result(b, n, _plus(b, xr, yr, dt, sign), _plus(b, xi, yi, dt, sign), dt)


@_complex_op("div")
def _div(b: Builder, n, p):
    if p.get("rounding_mode") is not None:
        raise Unsupported("complex division with a rounding mode")
    dt = out_dtype(n)
    (xr, xi), (yr, yi) = _parts(p["self"]), _parts(p["other"])
    if _is_zero(yi):  # by a real divisor: each part divided
        inv = 1.0 / yr if isinstance(yr, (int, float)) else b.op("reciprocal", [b.tensor(yr, dt)])
    else:  # (xr + i xi) / (yr + i yi) = (xr + i xi)(yr - i yi) / (yr^2 + yi^2)
        inv = b.op("reciprocal", [b.tensor(_plus(b, _times(b, yr, yr, dt), _times(b, yi, yi, dt), dt), dt)])
        xr, xi = (_plus(b, _times(b, xr, yr, dt), _times(b, xi, yi, dt), dt),
                  _plus(b, _times(b, xi, yr, dt), _times(b, xr, yi, dt), dt, -1.0))
    return _result(b, n, _times(b, xr, inv, dt), _times(b, xi, inv, dt), dt)


@_complex_op("neg")
def _neg(b: Builder, n, p):
    dt = out_dtype(n)
    re, im = _parts(p["self"])
    return Complex(b.negative(re, dt), None if im is None else b.negative(im, dt))


@_complex_op("conj", "_conj", "conj_physical")
def _conj(b: Builder, n, p):
    re, im = _parts(p["self"])
    return Complex(re, None if im is None else b.negative(im, b.dtype(im)))


@_complex_op("exp")
def _exp(b: Builder, n, p):
    """``exp(a + ib) = exp(a) (cos b + i sin b)``."""
    dt = out_dtype(n)
    re, im = _parts(p["self"])
    magnitude = b.op("exp", [b.tensor(re, dt)])
    if im is None:
        return Complex(magnitude, None)
    im = b.tensor(im, dt)
    return Complex(b.op("multiply", [magnitude, b.op("cosine", [im])]),
                   b.op("multiply", [magnitude, b.op("sine", [im])]))


# --- building complex tensors from real ones ---------------------------------------------------------
@converts("view_as_complex")
def _view_as_complex(b: Builder, n, p):
    x = p["self"]
    if isinstance(x, RealView):
        return x.value
    if isinstance(x, Const):
        return Complex(Const(x.value[..., 0].contiguous(), f"{x.name}.re"),
                       Const(x.value[..., 1].contiguous(), f"{x.name}.im"))
    rank = b.rank(x)
    if b.shape(x)[-1] != 2:
        raise Unsupported("view_as_complex of a tensor whose last dim is not 2")

    def part(i: int) -> str:
        return b.reshape(b.op("index", [x], dim=rank - 1, start=i, stop=i + 1, stride=1), b.shape(x)[:-1])
    return Complex(part(0), part(1))


@converts("polar")
def _polar(b: Builder, n, p):
    """``abs * (cos(angle) + i sin(angle))``."""
    dt = out_dtype(n)
    magnitude, angle = b.tensor(p["abs"], dt), b.tensor(p["angle"], dt)
    return Complex(b.op("multiply", [magnitude, b.op("cosine", [angle])]),
                   b.op("multiply", [magnitude, b.op("sine", [angle])]))


@converts("complex")
def _complex(b: Builder, n, p):
    dt = out_dtype(n)
    return Complex(b.tensor(p["real"], dt), b.tensor(p["imag"], dt))


__all__ = ["COMPLEX_OPS", "PARTWISE", "convert"]
