"""Pooling: max_pool1d/2d/3d and avg_pool1d/2d/3d with TT-Buda's arguments.

Padding is canonical as in :mod:`pybuda.ops.conv` ((before, after) pairs, last spatial dim first), so
it may be asymmetric. Output sizes follow torch's rule, including ``ceil_mode``'s "the last window
must start inside the input or the left padding". Padded positions never win a max; for averages
they count toward the divisor when ``count_include_pad``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from pybuda.ops import integer
from pybuda.ops.common import int_tuple
from pybuda.ops.conv import canonical_padding, conv_transpose_full, one_hot_kernels, unfold_windows
from pybuda.ops.registry import OpDef, attr, register
from pybuda.ops.tm import pad_dim


def _out_size(size: int, k: int, s: int, before: int, after: int, d: int, ceil_mode: bool) -> int:
    span = size + before + after - d * (k - 1) - 1
    n = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (n - 1) * s >= size + before:
        n -= 1
    return n


def _canonical(nd: int):
    def canonicalize(shapes, attrs):
        out = dict(attrs)
        out["kernel_size"] = int_tuple(attrs["kernel_size"], nd, "kernel_size")
        out["stride"] = int_tuple(attrs["stride"], nd, "stride")
        if "dilation" in attrs:
            out["dilation"] = int_tuple(attrs["dilation"], nd, "dilation")
        dilation = out.get("dilation", (1,) * nd)
        out["padding"] = canonical_padding(attrs["padding"], out["kernel_size"], dilation, "half")
        if min(out["kernel_size"]) < 1 or min(out["stride"]) < 1 or min(dilation) < 1:
            raise ValueError("kernel_size, stride and dilation must be >= 1")
        if attrs.get("divisor_override") is not None and attrs["divisor_override"] <= 0:
            raise ValueError(f"divisor_override must be positive, got {attrs['divisor_override']}")
        return out

    return canonicalize


def _layout(shape, nd: int, channel_last: bool):
    need = nd + 1
    if len(shape) < need:
        raise ValueError(f"pooling over {nd} spatial dim(s) needs rank >= {need}, got shape {list(shape)}")
    first = len(shape) - nd - (1 if channel_last else 0)
    return list(range(first, first + nd))  # indices of the spatial dims, in (D,) H, W order


def _shape(nd: int):
    def shape(shapes, attrs):
        out = list(shapes[0])
        dims = _layout(out, nd, attrs["channel_last"])
        dilation = attrs.get("dilation", (1,) * nd)
        pads = attrs["padding"]
        for i, dim in enumerate(dims):
            before, after = pads[2 * (nd - 1 - i)], pads[2 * (nd - 1 - i) + 1]
            n = _out_size(out[dim], attrs["kernel_size"][i], attrs["stride"][i], before, after, dilation[i],
                          attrs["ceil_mode"])
            if n < 1:
                raise ValueError(f"spatial dim {dim} of size {out[dim]} gives an empty output "
                                 f"(kernel {attrs['kernel_size'][i]}, padding ({before}, {after}))")
            out[dim] = n
        return tuple(out)

    return shape


_TORCH_POOL = {("max", 2): F.max_pool2d, ("max", 3): F.max_pool3d, ("avg", 2): F.avg_pool2d, ("avg", 3): F.avg_pool3d}


def _eval(nd: int, kind: str):
    def evaluate(x, attrs):
        t = x[0]
        channel_last = attrs["channel_last"]
        if channel_last:
            t = t.movedim(-1, -nd - 1)
        spatial = tuple(t.shape[-nd:])
        k, s = attrs["kernel_size"], attrs["stride"]
        d = attrs.get("dilation", (1,) * nd)
        pads = attrs["padding"]
        pairs = [(pads[2 * (nd - 1 - i)], pads[2 * (nd - 1 - i) + 1]) for i in range(nd)]  # (D,) H, W order
        # torch pools 2-D/3-D windows over [N, C, ...]: fold every leading dim into C, and run 1-D
        # pools as 2-D with a height of 1.
        flat = t.reshape((1, -1) + spatial)
        if nd == 1:
            flat, k, s, d, pairs = flat.unsqueeze(2), (1,) + k, (1,) + s, (1,) + d, [(0, 0)] + pairs
        run_nd = max(nd, 2)
        fn = _with_float32_fallback(_TORCH_POOL[(kind, run_nd)])
        expected = [_out_size(flat.shape[2 + i], k[i], s[i], *pairs[i], d[i], attrs["ceil_mode"])
                    for i in range(run_nd)]
        symmetric = all(b == a and b <= kk // 2 for (b, a), kk in zip(pairs, k))
        if symmetric and (kind == "max" or attrs["divisor_override"] is None):
            # torch's own padding handles symmetric pads (and ceil_mode) exactly.
            padding = [b for b, _ in pairs]
            if kind == "max":
                out = fn(flat, k, s, padding, d, attrs["ceil_mode"])
            else:
                out = fn(flat, k, s, padding, attrs["ceil_mode"], attrs["count_include_pad"])
        else:
            out = _prepadded(flat, kind, k, s, d, pairs, attrs, fn)
            for i, n in enumerate(expected):  # pre-padding can only add trailing ceil_mode windows
                out = out.narrow(2 + i, 0, n)
        out = out.reshape(tuple(t.shape[:-nd]) + tuple(out.shape[-nd:]))
        if channel_last:
            out = out.movedim(-nd - 1, -1)
        return out

    return evaluate


def _with_float32_fallback(fn):
    """``fn`` on the input's dtype; where torch has no CPU kernel for it (avg_pool3d on half types),
    compute in float32 and round the result back to the input dtype."""
    def run(t, *args):
        try:
            return fn(t, *args)
        except NotImplementedError:
            if t.dtype not in (torch.float16, torch.bfloat16):
                raise
            return fn(t.float(), *args).to(t.dtype)
    return run


def _prepadded(flat, kind, k, s, d, pairs, attrs, fn):
    """Pool with explicit (possibly asymmetric or large) padding applied up front."""
    fill = float("-inf") if kind == "max" else 0.0
    padded = flat
    for i, (before, after) in enumerate(pairs):
        padded = pad_dim(padded, 2 + i, before, after, value=fill)
    if kind == "max":
        return fn(padded, k, s, 0, d, attrs["ceil_mode"])
    sums = fn(padded, k, s, 0, attrs["ceil_mode"], True, 1)
    if attrs["divisor_override"] is not None:
        return sums / attrs["divisor_override"]
    mask = torch.ones((1, 1) + tuple(flat.shape[2:]), dtype=flat.dtype)
    if attrs["count_include_pad"]:
        for i, (before, after) in enumerate(pairs):
            mask = pad_dim(mask, 2 + i, before, after, value=1.0)
    else:
        for i, (before, after) in enumerate(pairs):
            mask = pad_dim(mask, 2 + i, before, after, value=0.0)
    counts = fn(mask, k, s, 0, attrs["ceil_mode"], True, 1)
    return sums / counts


def _attrs(nd: int, kind: str):
    attrs = {"kernel_size": attr(int, tuple), "stride": attr(int, tuple, default=1),
             "padding": attr(int, tuple, str, default=0), "ceil_mode": attr(bool, default=False)}
    if kind == "max":
        attrs["dilation"] = attr(int, tuple, default=1)
    else:
        attrs["count_include_pad"] = attr(bool, default=True)
        attrs["divisor_override"] = attr(float, int, default=None)
    attrs["channel_last"] = attr(bool, default=False)
    return attrs


# --- backward (autograd) --------------------------------------------------------------------------------
# Both pools work on [1, C', spatial..] (every leading dim folded into the channels, one sample as the
# device's convolutions take it; 1-D runs as 2-D with a height of 1) and send window gradients back with a
# depthwise transposed convolution (pybuda.ops.conv).

_FILL = -1.0e38  # padding that never wins a max (finite, so 0 * fill stays 0 in the window convolution)


def _pool_frame(ac, t: str, nd: int, attrs):
    """``t`` as [1, C', spatial..] plus the run-time kernel/stride/dilation/pads (2-D for 1-D pools)."""
    if attrs["channel_last"]:
        t = ac.movedim(t, -1, -nd - 1)
    shape = ac.shape(t)
    spatial = tuple(shape[-nd:])
    lead = math.prod(shape[:-nd])
    k, s = tuple(attrs["kernel_size"]), tuple(attrs["stride"])
    d = tuple(attrs.get("dilation", (1,) * nd))
    pads = attrs["padding"]
    pairs = [(pads[2 * (nd - 1 - i)], pads[2 * (nd - 1 - i) + 1]) for i in range(nd)]
    if nd == 1:
        spatial, k, s, d, pairs = (1,) + spatial, (1,) + k, (1,) + s, (1,) + d, [(0, 0)] + pairs
    return ac.reshape(t, (1, lead) + spatial), shape, k, s, d, pairs


def _channel_first_shape(shape, nd: int, channel_last: bool):
    if not channel_last:
        return tuple(shape)
    shape = list(shape)
    shape.insert(len(shape) - nd - 1, shape.pop())
    return tuple(shape)


def _pool_restore(ac, t: str, nd: int, attrs, cf_shape, shape) -> str:
    t = ac.reshape(t, cf_shape)
    if attrs["channel_last"]:
        t = ac.movedim(t, -nd - 1, -1)
    return ac.reshape(t, shape)


def _scatter_windows(ac, g: str, weight: str, k, s, d, pairs, in_spatial, groups: int) -> str:
    """Sum window gradients ``g`` [1, C' * K, O..] back onto the input positions through ``weight``."""
    run_nd = len(k)
    full = conv_transpose_full(ac, g, weight, run_nd, s, d, groups)
    for i in range(run_nd):
        full = ac.fit_dim(full, 2 + i, -pairs[i][0], in_spatial[i])
    return full


def _avg_pool_bw(nd: int):
    def backward(ac, operand, inputs, output, grad, attrs):
        shape = ac.shape(inputs[0])
        g, _, k, s, d, pairs = _pool_frame(ac, grad, nd, attrs)
        cf_shape = _channel_first_shape(shape, nd, attrs["channel_last"])
        in_spatial = ((1,) if nd == 1 else ()) + tuple(cf_shape[-nd:])
        # 1 / divisor per window, a compile-time constant: the average of ones over the count of input
        # positions in the window (windows with none get no gradient).
        cf_attrs = {**attrs, "channel_last": False}
        ones = torch.ones((1,) + tuple(cf_shape[-nd:]))
        avg = _eval(nd, "avg")([ones], cf_attrs)
        count = _eval(nd, "avg")([ones], {**cf_attrs, "divisor_override": 1})
        scale = (avg / count.clamp(min=1.0)).reshape((1, 1) + tuple(ac.shape(g)[2:]))
        g = ac.mul(g, ac.constant(scale.to(torch.float32)))
        channels = ac.shape(g)[1]
        weight = ac.constant(torch.ones((channels, 1) + k))
        dx = _scatter_windows(ac, g, weight, k, s, d, pairs, in_spatial, channels)
        return _pool_restore(ac, dx, nd, attrs, cf_shape, shape)

    return backward


def _max_pool_bw(nd: int):
    # The gradient of each window goes to its first maximum (torch's rule). The windows are unfolded by a
    # convolution with one-hot kernels, the winner masked, and the masked gradients summed back.
    def backward(ac, operand, inputs, output, grad, attrs):
        shape = ac.shape(inputs[0])
        x, cf_shape, k, s, d, pairs = _pool_frame(ac, ac.fwd(inputs[0]), nd, attrs)
        g = _pool_frame(ac, grad, nd, attrs)[0]
        run_nd = len(k)
        in_spatial = ac.shape(x)[2:]
        out_spatial = ac.shape(g)[2:]
        for i in range(run_nd):
            need = (out_spatial[i] - 1) * s[i] + d[i] * (k[i] - 1) + 1  # every (ceil_mode) window exists
            before = pairs[i][0]
            after = max(pairs[i][1], need - in_spatial[i] - before)
            x = ac.pad_dim(x, 2 + i, before, after, _FILL)
        channels, taps = ac.shape(x)[1], math.prod(k)
        windows = unfold_windows(ac, x, run_nd, k, s, d, out_spatial)  # [1, C' * K, O..]
        windows = ac.reshape(windows, (channels, taps) + tuple(out_spatial))
        best = ac.op("reduce_max", [windows], {"dim": 1})
        mask = ac.op("equal", [windows, best])
        first = ac.mul(mask, ac.op("equal", [ac.op("cumsum", [mask], {"axis": 1}), ac.constant(1.0)]))
        g = ac.reshape(g, (channels, 1) + tuple(out_spatial))
        picked = ac.reshape(ac.mul(first, g), (1, channels * taps) + tuple(out_spatial))
        weight = ac.constant(one_hot_kernels(channels, k))
        dx = _scatter_windows(ac, picked, weight, k, s, d, pairs, in_spatial, channels)
        return _pool_restore(ac, dx, nd, attrs, cf_shape, shape)

    return backward


def _register(nd: int, kind: str) -> None:
    layout = {1: "[.., C, L]", 2: "[.., C, H, W]", 3: "[.., C, D, H, W]"}[nd]
    what = "maximum" if kind == "max" else "average"
    backward = _max_pool_bw(nd) if kind == "max" else _avg_pool_bw(nd)
    register(OpDef(name=f"{kind}_pool{nd}d", family="pool", arity=(1, 1), shape=_shape(nd), eval=_eval(nd, kind),
                   backward=backward, int_range=integer.moves_data if kind == "max" else None,
                   attrs=_attrs(nd, kind), canonicalize=_canonical(nd),
                   doc=f"{nd}-D {what} pooling of {layout} activations (channel_last: channels last); "
                       f"padding is stored as "
                       f"{2 * nd} values, (before, after) per spatial dim, last dim first."))


for _nd in (1, 2, 3):
    for _kind in ("max", "avg"):
        _register(_nd, _kind)
