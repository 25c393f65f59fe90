"""Convolutions: conv2d, conv2d_transpose, conv3d.

Padding is stored canonically as one (before, after) pair per spatial dim, last dim first:
``(left, right, top, bottom)`` for 2-D and ``(left, right, top, bottom, front, back)`` for 3-D, the
order ``torch.nn.functional.pad`` takes. :func:`canonical_padding` turns the user forms (int, 'same',
'valid', one value per spatial dim, or the full tuple) into that.
"""

from __future__ import annotations

import math
from typing import Any, Sequence, Tuple

import torch
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


# --- backward (autograd) --------------------------------------------------------------------------------
# Shared with the pools: gradients of convolutions are convolutions (transposed for the activations, with
# batch and channels swapped for the weights), built from the registry's conv ops.


def _flip(ac, w: str, dims) -> str:
    """``w`` reversed along each of ``dims`` (a concatenation of its single-element slices)."""
    for d in dims:
        k = ac.shape(w)[d]
        if k > 1:
            w = ac.op("concatenate", [ac.crop(w, d, k - 1 - i, 1) for i in range(k)], {"axis": d})
    return w


def _swap_group_channels(ac, w: str, groups: int) -> str:
    """[A, B/G, k..] -> [B, A/G, k..]: the weights of the transposed (grouped) convolution."""
    shape = ac.shape(w)
    a, b_g, kernel = shape[0], shape[1], tuple(shape[2:])
    w = ac.reshape(w, (groups, a // groups, b_g) + kernel)
    w = ac.transpose(w, 1, 2)
    return ac.reshape(w, (groups * b_g, a // groups) + kernel)


def conv_transpose_full(ac, g: str, w: str, nd: int, stride, dilation, groups: int = 1) -> str:
    """The transposed convolution of ``g`` [N, Cg, O..] with weights ``w`` [Cg, Cout/groups, k..] (the
    layout conv2d_transpose takes, which is conv2d's [Cout, Cin/groups, k..]) with no padding: spatial
    sizes (O - 1) * stride + dilation * (k - 1) + 1. 2-D uses conv2d_transpose; 3-D (no transposed op in
    the registry) zero-inserts ``g`` by the stride and runs conv3d with the flipped weights."""
    stride, dilation = tuple(stride), tuple(dilation)
    if nd == 2:
        return ac.op("conv2d_transpose", [g, w], {"stride": stride, "dilation": dilation, "groups": groups,
                                                   "padding": 0, "output_padding": 0})
    kernel = ac.shape(w)[2:]
    for i in range(nd):
        dim, s = 2 + i, stride[i]
        if s > 1:  # zero insertion: g0 0 .. 0 g1 0 .. (s - 1 zeros), cropped after the last element
            zeros = ac.zeros(ac.shape(g), ac.dtype(g))
            size = ac.shape(g)[dim]
            g = ac.op("interleave", [g] + [zeros] * (s - 1), {"axis": dim, "stride": 1})
            g = ac.crop(g, dim, 0, (size - 1) * s + 1)
        edge = dilation[i] * (kernel[i] - 1)
        g = ac.pad_dim(g, dim, edge, edge)
    weights = _flip(ac, _swap_group_channels(ac, w, groups), range(2, 2 + nd))
    return ac.op(f"conv{nd}d", [g, weights], {"stride": 1, "dilation": dilation, "groups": groups, "padding": 0})


def one_hot_kernels(channels: int, kernel) -> torch.Tensor:
    """[channels * K, 1, k..] weights of a depthwise convolution that copies each of the K = prod(kernel)
    taps of every window into its own output channel (im2col as a convolution with constant weights)."""
    taps = math.prod(kernel)
    return torch.eye(taps).reshape((taps, 1) + tuple(kernel)).repeat((channels, 1) + (1,) * len(kernel))


def unfold_windows(ac, a: str, nd: int, kernel, stride, dilation, out_spatial) -> str:
    """[N, A * K, O..]: every window of ``a`` [N, A, S..] (channel c's tap j at channel c * K + j)."""
    channels = ac.shape(a)[1]
    weight = ac.constant(one_hot_kernels(channels, kernel).to(ac.dtype(a)))
    windows = ac.op(f"conv{nd}d", [a, weight], {"stride": tuple(stride), "dilation": tuple(dilation),
                                                "groups": channels, "padding": 0})
    for i in range(nd):
        windows = ac.crop(windows, 2 + i, 0, out_spatial[i])
    return windows


def conv_weight_grad(ac, a: str, b: str, nd: int, stride, dilation, groups: int, kernel) -> str:
    """sum over n, o of a[n, i, o * stride + k * dilation] * b[n, j, o] as [B, A/groups, k..], keeping only
    the (i, j) pairs of one group: the weight gradient of conv(a -> b) (``a`` the padded input, ``b`` the
    output gradient), or of a transposed conv with the roles swapped. Windows of ``a`` are unfolded by a
    convolution with constant one-hot weights, then one matmul contracts them with ``b``."""
    n, a_ch = ac.shape(a)[:2]
    b_ch = ac.shape(b)[1]
    out_spatial = ac.shape(b)[2:]
    taps, pixels = math.prod(kernel), math.prod(out_spatial)
    windows = unfold_windows(ac, a, nd, kernel, stride, dilation, out_spatial)
    windows = ac.reshape(windows, (n, a_ch * taps, pixels))
    r = ac.op("matmul", [ac.reshape(b, (n, b_ch, pixels)), ac.transpose(windows, -2, -1)])  # [N, B, A*K]
    if n > 1:
        r = ac.reduce_sum(r, 0)
    r = ac.reshape(r, (b_ch, a_ch) + tuple(kernel))
    if groups > 1:
        ag, bg = a_ch // groups, b_ch // groups
        blocks = [ac.crop(ac.crop(r, 0, gi * bg, bg), 1, gi * ag, ag) for gi in range(groups)]
        r = ac.op("concatenate", blocks, {"axis": 0})
    return r


def channel_first(ac, t: str, nd: int, channel_last: bool, batched: bool = True) -> str:
    """A conv/pool operand as [N, C, spatial..]: channels moved before the spatial dims, a batch dim added."""
    if channel_last:
        t = ac.movedim(t, -1, -nd - 1)
    if not batched:
        t = ac.reshape(t, (1,) + ac.shape(t))
    return t


def channel_restore(ac, t: str, nd: int, channel_last: bool, shape) -> str:
    """Undo :func:`channel_first` for a gradient of ``shape``."""
    if len(shape) == nd + 1:  # unbatched
        t = ac.reshape(t, ac.shape(t)[1:])
    if channel_last:
        t = ac.movedim(t, -nd - 1, -1)
    return ac.reshape(t, shape)


def _conv_bw(nd: int, transpose: bool):
    def backward(ac, operand, inputs, output, grad, attrs):
        cl = attrs["channel_last"]
        act_shape = ac.shape(inputs[0])
        batched = len(act_shape) == nd + 2
        if operand == 2:  # bias: one value per output channel
            return ac.sum_to(grad, -1 if cl else -nd - 1, ac.shape(inputs[2]))
        stride, dilation, groups, pads = attrs["stride"], attrs["dilation"], attrs["groups"], attrs["padding"]
        g = channel_first(ac, grad, nd, cl, batched)
        w = ac.fwd(inputs[1])
        kernel = ac.shape(inputs[1])[2:]
        x = channel_first(ac, ac.fwd(inputs[0]), nd, cl, batched) if operand == 1 else None
        in_spatial = (act_shape[-nd - 1:-1] if cl else act_shape[-nd:])
        befores = [pads[2 * (nd - 1 - i)] for i in range(nd)]
        afters = [pads[2 * (nd - 1 - i) + 1] for i in range(nd)]
        if not transpose:
            if operand == 0:
                dx = conv_transpose_full(ac, g, w, nd, stride, dilation, groups)
                for i in range(nd):
                    dx = ac.fit_dim(dx, 2 + i, -befores[i], in_spatial[i])
                return channel_restore(ac, dx, nd, cl, act_shape)
            for i in range(nd):
                x = ac.pad_dim(x, 2 + i, befores[i], afters[i])
            return conv_weight_grad(ac, x, g, nd, stride, dilation, groups, kernel)
        # Transposed: out = crop(full), full = conv_transpose(x); the gradient of full is grad placed back.
        for i in range(nd):
            full = (in_spatial[i] - 1) * stride[i] + dilation[i] * (kernel[i] - 1) + 1 + attrs["output_padding"][i]
            g = ac.fit_dim(g, 2 + i, befores[i], full)
        if operand == 0:
            dx = ac.op(f"conv{nd}d", [g, w], {"stride": stride, "dilation": dilation, "groups": groups, "padding": 0})
            for i in range(nd):
                dx = ac.crop(dx, 2 + i, 0, in_spatial[i])
            return channel_restore(ac, dx, nd, cl, act_shape)
        return conv_weight_grad(ac, g, x, nd, stride, dilation, groups, kernel)

    return backward


def _register(name: str, nd: int, transpose: bool, doc: str) -> None:
    register(OpDef(name=name, family="conv", arity=(2, 3), shape=_conv_shape(nd, transpose),
                   eval=_conv_eval(nd, transpose), attrs=_conv_attrs(transpose), backward=_conv_bw(nd, transpose),
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
