"""JAX converters for complex values: a complex array is a pair of real tensors
(:class:`~pybuda.frontend.aten_builder.Complex`), as in the torch frontend (:mod:`pybuda.frontend.aten_complex`,
:mod:`pybuda.frontend.aten_complex_ops`).

``jnp.fft``'s transforms are DFT matmuls on the parts; ``real``, ``imag``, ``lax.complex`` and ``conj`` build or read
pairs; :func:`complex_eqn` runs any other equation with a complex operand: a data move once per part, complex
arithmetic on the parts. Registered into :data:`pybuda.frontend.jax.converting.CONVERTERS` when
:mod:`pybuda.frontend.jax.primitives` is imported.
"""

from __future__ import annotations

from typing import Any, Callable, Tuple

import numpy as np

from pybuda.frontend.aten_builder import Builder, Complex, Const, Unsupported
from pybuda.frontend.jax.converting import converts, in_shape, out_dtype, tensor_of

@converts("fft")
def _fft(b: Builder, eqn, args):
    """``jnp.fft``'s transforms over the last ``len(fft_lengths)`` dims: DFT matmuls on the real and imaginary
    parts (the torch frontend's :func:`~pybuda.frontend.aten_complex.dft`); the inverses scale by 1 / n."""
    from pybuda.frontend.aten_complex import as_complex, dft, real_from_onesided

    kind = getattr(eqn.params["fft_type"], "name", str(eqn.params["fft_type"])).split(".")[-1].upper()
    lengths = [int(n) for n in eqn.params["fft_lengths"]]
    rank = len(in_shape(eqn, 0))
    dims = list(range(rank - len(lengths), rank))
    x = args[0]
    if kind == "RFFT":
        if isinstance(x, Complex):
            raise Unsupported("rfft of a complex tensor")
        v = dft(b, as_complex(b, tensor_of(b, eqn, args, 0)), dims[-1], lengths[-1], False, "none", onesided=True)
        for d, n in zip(dims[:-1], lengths[:-1]):
            v = dft(b, v, d, n, False, "none")
        return v
    v = as_complex(b, x)
    if kind in ("FFT", "IFFT"):
        for d, n in zip(dims, lengths):
            v = dft(b, v, d, n, kind == "IFFT", "n" if kind == "IFFT" else "none")
        return v
    if kind == "IRFFT":
        for d, n in zip(dims[:-1], lengths[:-1]):
            v = dft(b, v, d, n, True, "n")
        return real_from_onesided(b, v, dims[-1], lengths[-1], "n")
    raise Unsupported(f"FFT of type {kind}")


#: Primitives that move or pick data: on a complex value they run once on each part.
COMPLEX_PARTWISE = frozenset({"pad", "reshape", "slice", "transpose", "concatenate", "broadcast_in_dim", "squeeze",
                              "expand_dims", "rev", "copy", "copy_p", "dynamic_slice", "reduce_sum"})


def complex_eqn(b: Builder, eqn, args, conv: Callable) -> Any:
    """Equation ``eqn`` with a complex operand (a :class:`Complex` pair): a data move (:data:`COMPLEX_PARTWISE`) run on
    the real and on the imaginary parts, complex ``add``/``sub``/``mul``/``neg``/``conj`` on the parts; Unsupported
    otherwise (the torch frontend's :mod:`pybuda.frontend.aten_complex_ops`, for jaxprs)."""
    from pybuda.frontend.aten_complex_ops import _is_zero, _plus, _times

    prim = eqn.primitive.name
    dt = out_dtype(eqn).to_real() if out_dtype(eqn).is_complex else out_dtype(eqn)
    parts = [_parts_of(a) for a in args]
    if prim in COMPLEX_PARTWISE:
        real_eqn = _with_real_avals(eqn)
        re = conv(b, real_eqn, [p[0] for p in parts])
        complex_args = [k for k, a in enumerate(args) if _parts_of(a)[1] is not _REAL]
        if all(_is_zero(parts[k][1]) for k in complex_args):
            return Complex(re, None)
        im = conv(b, real_eqn, [p[1] if k in complex_args else p[0] for k, p in enumerate(parts)])
        return Complex(re, im)
    parts = [(re, None if im is _REAL else im) for re, im in parts]
    if prim in ("add", "sub"):
        (xr, xi), (yr, yi) = parts
        sign = -1.0 if prim == "sub" else 1.0
        return Complex(b.tensor(_plus(b, xr, yr, dt, sign), dt), _plus(b, xi, yi, dt, sign))
    if prim == "mul":
        (xr, xi), (yr, yi) = parts
        re = _plus(b, _times(b, xr, yr, dt), _times(b, xi, yi, dt), dt, -1.0)
        return Complex(b.tensor(re, dt), _plus(b, _times(b, xr, yi, dt), _times(b, xi, yr, dt), dt))
    if prim in ("neg", "conj"):
        xr, xi = parts[0]
        return Complex(b.negative(xr, dt) if prim == "neg" else xr,
                       None if xi is None else b.negative(xi, dt))
    raise Unsupported(f"{prim} of a complex tensor")


_REAL = object()  # marks an operand that is not complex at all (its imaginary part is not a zero tensor: absent)


def _parts_of(a: Any) -> Tuple[Any, Any]:
    """(real part, imaginary part) of an operand: a Complex pair, a complex literal or constant (split), or a real
    operand (:data:`_REAL` as its imaginary part)."""
    if isinstance(a, Complex):
        return a.re, a.im
    if isinstance(a, complex):
        return a.real, (a.imag if a.imag else 0.0)
    if isinstance(a, Const) and a.value.is_complex():
        return Const(a.value.real.contiguous(), f"{a.name}.re"), Const(a.value.imag.contiguous(), f"{a.name}.im")
    return a, _REAL


def _with_real_avals(eqn) -> Any:
    """``eqn`` with its complex avals as their real parts' (the part-wise converters read shapes and dtypes there)."""
    from types import SimpleNamespace

    def real(var):
        aval = getattr(var, "aval", None)
        if aval is None or not np.issubdtype(aval.dtype, np.complexfloating):
            return var
        return SimpleNamespace(aval=aval.update(dtype=np.float32 if aval.dtype == np.complex64 else np.float64))

    return SimpleNamespace(primitive=eqn.primitive, params=eqn.params, invars=[real(v) for v in eqn.invars],
                           outvars=[real(v) for v in eqn.outvars])


@converts("real", "imag")
def _real_imag(b: Builder, eqn, args):
    x = args[0]
    if not isinstance(x, Complex):
        raise Unsupported(f"{eqn.primitive.name} of a tensor that is not complex")
    return b.tensor(x.re) if eqn.primitive.name == "real" else b.imaginary(x)


@converts("conj")
def _conj(b: Builder, eqn, args):
    """``jnp.conj`` of a real tensor is the tensor (of a complex pair, :func:`complex_eqn` negates its imaginary part)."""
    return tensor_of(b, eqn, args, 0)


@converts("complex")
def _complex(b: Builder, eqn, args):
    """``lax.complex(re, im)``: the pair."""
    dt = out_dtype(eqn).to_real()
    return Complex(tensor_of(b, eqn, args, 0, dt), tensor_of(b, eqn, args, 1, dt))
