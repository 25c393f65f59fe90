"""Convolutions: conv2d, conv2d_transpose, conv3d.

Padding is stored canonically as one (before, after) pair per spatial dim, last dim first:
``(left, right, top, bottom)`` for 2-D and ``(left, right, top, bottom, front, back)`` for 3-D, the
order ``torch.nn.functional.pad`` takes. :func:`canonical_padding` turns the user forms (int, 'same',
'valid', one value per spatial dim, or the full tuple) into that.
"""

from __future__ import annotations

import math
from typing import Any, Sequence, Tuple

import torch.nn.functional as F

from pybuda.ops.common import float_dtype, int_tuple
from pybuda.ops.registry import OpDef, attr, register


def canonical_padding(padding: Any, kernel: Sequence[int], dilation: Sequence[int] = None,
                      same_rule: str = "conv") -> Tuple[int, ...]:
    """Padding as (before, after) pairs, last spatial dim first.

    ``kernel`` and ``dilation`` are per spatial dim in (D,) H, W order. A sequence with one value per
    spatial dim is (pD,) pH, pW, padded on both sides, as in torch. ``'same'`` follows TT-Buda: for
    convolutions (``same_rule='conv'``) the effective kernel is split with any odd pixel before
    (left/top), so stride-1 output keeps the input size; for transposed convolutions and pools
    (``same_rule='half'``) both sides get kernel // 2.
    """
    nd = len(kernel)
    dilation = tuple(dilation) if dilation is not None else (1,) * nd
    if isinstance(padding, bool):
        raise ValueError(f"padding must be an int, 'same', 'valid' or a sequence of ints, got {padding!r}")
    if isinstance(padding, int):
        pads = (padding,) * (2 * nd)
    elif isinstance(padding, str):
        if padding == "valid":
            pads = (0,) * (2 * nd)
        elif padding == "same":
            pads = ()
            for k, d in zip(reversed(kernel), reversed(dilation)):
                if same_rule == "conv":
                    eff = d * (k - 1) + 1
                    pads += (eff // 2, eff // 2 - (1 - eff % 2))
                else:
                    pads += (k // 2, k // 2)
        else:
            raise ValueError(f"padding string must be 'same' or 'valid', got {padding!r}")
    elif isinstance(padding, (tuple, list)) and all(isinstance(p, int) and not isinstance(p, bool) for p in padding):
        if len(padding) == nd:
            pads = tuple(p for p in reversed(padding) for _ in range(2))
        elif len(padding) == 2 * nd:
            pads = tuple(padding)
        else:
            raise ValueError(f"padding needs {nd} or {2 * nd} values, got {tuple(padding)}")
    else:
        raise ValueError(f"padding must be an int, 'same', 'valid' or a sequence of ints, got {padding!r}")
    if any(p < 0 for p in pads):
        raise ValueError(f"padding must not be negative, got {pads}")
    return pads


def _conv_canonical(nd: int, transpose: bool):
    def canonicalize(shapes, attrs):
        if len(shapes[1]) != nd + 2:
            raise ValueError(f"weights need rank {nd + 2}, got shape {list(shapes[1])}")
        kernel = tuple(shapes[1][2:])
        out = dict(attrs)
        out["stride"] = int_tuple(attrs["stride"], nd, "stride")
        out["dilation"] = int_tuple(attrs["dilation"], nd, "dilation")
        out["padding"] = canonical_padding(attrs["padding"], kernel, out["dilation"],
                                           "half" if transpose else "conv")
        if transpose:
            out["output_padding"] = int_tuple(attrs["output_padding"], nd, "output_padding")
        if min(out["stride"]) < 1 or min(out["dilation"]) < 1 or attrs["groups"] < 1:
            raise ValueError("stride, dilation and groups must be >= 1")
        return out

    return canonicalize


def _spatial_layout(act_shape, nd: int, channel_last: bool):
    """(batch dims, channels, spatial dims) of an activation; a missing batch dim is allowed."""
    if len(act_shape) not in (nd + 1, nd + 2):
        raise ValueError(f"activations need rank {nd + 1} or {nd + 2}, got shape {list(act_shape)}")
    batch = tuple(act_shape[:len(act_shape) - nd - 1])
    if channel_last:
        return batch, act_shape[-1], tuple(act_shape[-nd - 1:-1])
    return batch, act_shape[-nd - 1], tuple(act_shape[-nd:])


def _conv_shape(nd: int, transpose: bool):
    def shape(shapes, attrs):
        batch, cin, spatial = _spatial_layout(shapes[0], nd, attrs["channel_last"])
        w = shapes[1]
        groups = attrs["groups"]
        if transpose:
            if w[0] != cin or cin % groups:
                raise ValueError(f"conv2d_transpose weights [Cin, Cout/groups, k..] must have Cin={cin} "
                                 f"divisible by groups={groups}, got {list(w)}")
            cout = w[1] * groups
        else:
            cout = w[0]
            if cin % groups or w[1] * groups != cin or cout % groups:
                raise ValueError(f"weights [Cout, Cin/groups, k..] = {list(w)} do not fit {cin} input channels "
                                 f"with groups={groups}")
        if len(shapes) == 3 and math.prod(shapes[2]) != cout:
            raise ValueError(f"bias of shape {list(shapes[2])} must hold {cout} values (one per output channel)")
        pads = attrs["padding"]
        out_spatial = []
        for i, size in enumerate(spatial):
            k, s, d = w[2 + i], attrs["stride"][i], attrs["dilation"][i]
            before, after = pads[2 * (nd - 1 - i)], pads[2 * (nd - 1 - i) + 1]
            if transpose:
                op = attrs["output_padding"][i]
                if op >= max(s, d):
                    raise ValueError(f"output_padding {op} must be smaller than stride or dilation")
                n = (size - 1) * s + d * (k - 1) + 1 + op - before - after
            else:
                n = (size + before + after - d * (k - 1) - 1) // s + 1
            if n < 1:
                raise ValueError(f"spatial dim {i} of size {size} gives an empty output (kernel {k}, stride {s}, "
                                 f"dilation {d}, padding ({before}, {after}))")
            out_spatial.append(n)
        if attrs["channel_last"]:
            return batch + tuple(out_spatial) + (cout,)
        return batch + (cout,) + tuple(out_spatial)

    return shape


_CONV = {2: (F.conv2d, F.conv_transpose2d), 3: (F.conv3d, F.conv_transpose3d)}


def _conv_eval(nd: int, transpose: bool):
    def evaluate(x, attrs):
        act = x[0]
        dtype = float_dtype(act.dtype)
        act = act.to(dtype)
        weight = x[1].to(dtype)
        unbatched = act.dim() == nd + 1
        if unbatched:
            act = act.unsqueeze(0)
        if attrs["channel_last"]:
            act = act.movedim(-1, 1)
        pads = attrs["padding"]
        stride, dilation, groups = attrs["stride"], attrs["dilation"], attrs["groups"]
        if transpose:
            out = _CONV[nd][1](act, weight, None, stride, 0, attrs["output_padding"], groups, dilation)
            # Padding of a transposed conv removes output pixels; crop each spatial dim.
            for i in range(nd):
                before, after = pads[2 * (nd - 1 - i)], pads[2 * (nd - 1 - i) + 1]
                dim = 2 + i
                out = out.narrow(dim, before, out.shape[dim] - before - after)
        else:
            out = _CONV[nd][0](F.pad(act, pads), weight, None, stride, 0, dilation, groups)
        if len(x) == 3:
            out = out + x[2].to(dtype).reshape((1, -1) + (1,) * nd)
        if attrs["channel_last"]:
            out = out.movedim(1, -1)
        return out.squeeze(0) if unbatched else out

    return evaluate


def _conv_attrs(transpose: bool):
    attrs = {"stride": attr(int, tuple, default=1), "padding": attr(int, tuple, str, default=0),
             "dilation": attr(int, tuple, default=1), "groups": attr(int, default=1),
             "channel_last": attr(bool, default=False)}
    if transpose:
        attrs["output_padding"] = attr(int, tuple, default=0)
    return attrs


def _register(name: str, nd: int, transpose: bool, doc: str) -> None:
    register(OpDef(name=name, family="conv", arity=(2, 3), shape=_conv_shape(nd, transpose),
                   eval=_conv_eval(nd, transpose), attrs=_conv_attrs(transpose),
                   canonicalize=_conv_canonical(nd, transpose), dtype=lambda d, a: float_dtype(d[0]), doc=doc))


_register("conv2d", 2, False,
          "conv2d(act [N, Cin, H, W], weight [Cout, Cin/groups, kH, kW][, bias [Cout]]); padding is stored as "
          "(left, right, top, bottom); channel_last takes and returns [N, H, W, C].")
_register("conv2d_transpose", 2, True,
          "Transposed conv2d(act [N, Cin, H, W], weight [Cin, Cout/groups, kH, kW][, bias]); padding "
          "(left, right, top, bottom) crops the full output; output_padding adds rows/cols at the end.")
_register("conv3d", 3, False,
          "conv3d(act [N, Cin, D, H, W], weight [Cout, Cin/groups, kD, kH, kW][, bias]); padding is stored as "
          "(left, right, top, bottom, front, back).")
