"""ONNX's recurrent layers on the device: LSTM unrolled over its (static) sequence into matmuls and activations.

The torch frontend sees ``nn.LSTM`` decomposed by ``torch.export`` into exactly these per-step ops; the ONNX
exporter keeps one LSTM node, which ran on the host. Weights must be initializers (they are split per gate and
transposed at import); peepholes, ``clip``, ``input_forget``, non-default activations and sequence lengths
shorter than the sequence stay on the host.
"""

from __future__ import annotations

from typing import Any, List

import torch

from pybuda.frontend.aten_builder import Unsupported
from pybuda.frontend.aten_shape import _index_range, _permute_by
from pybuda.frontend.onnx.converter import NodeCtx, converts

#: ONNX's gate order in W, R and B.
_GATES = "iofc"


@converts("LSTM")
def _lstm(ctx: NodeCtx):
    b, dt = ctx.b, ctx.dtype(0)
    if not dt.is_floating_point:
        raise Unsupported(f"LSTM on {str(dt).replace('torch.', '')} data")
    hidden = ctx.attr("hidden_size", types=(int,))
    direction = ctx.attr("direction", "forward", (str,), choices=("forward", "reverse", "bidirectional"))
    layout = ctx.attr("layout", 0, (int,), choices=(0, 1))
    dirs = 2 if direction == "bidirectional" else 1
    acts = ctx.attr("activations", None)
    ctx.attr("activation_alpha", None), ctx.attr("activation_beta", None)
    if acts is not None and [a.lower() for a in acts] != ["sigmoid", "tanh", "tanh"] * dirs:
        raise Unsupported(f"LSTM with activations {acts} (the device unrolls sigmoid/tanh/tanh)")
    if ctx.attr("input_forget", 0, (int,)) or ctx.attr("clip", None) is not None or ctx.has(7):
        raise Unsupported("LSTM with input_forget, clip or peepholes")
    w, r = ctx.const(1, "W").to(dt), ctx.const(2, "R").to(dt)
    bias = ctx.const(3, "B").to(dt) if ctx.has(3) else torch.zeros(dirs, 8 * hidden, dtype=dt)
    shape = ctx.shape(0)
    steps, batch, features = (shape[1], shape[0], shape[2]) if layout else shape
    if ctx.has(4) and bool((ctx.const(4, "sequence_lens") != steps).any()):
        raise Unsupported("LSTM with sequence lengths shorter than the sequence")
    x = _permute_by(b, ctx.x(0, dt), [1, 0, 2]) if layout else ctx.x(0, dt)
    flat = b.reshape(x, (steps * batch, features))

    def initial(k: int, d: int) -> str:
        if not ctx.has(k):
            return b.const(torch.zeros(batch, hidden, dtype=dt), f"{ctx.label}.zeros")
        return b.reshape(_index_range(b, ctx.x(k, dt), 1 if layout else 0, d, d + 1), (batch, hidden))

    ys: List[str] = []
    last_h: List[str] = []
    last_c: List[str] = []
    for d in range(dirs):
        reverse = direction == "reverse" or d == 1
        gates = {}
        for g, name in enumerate(_GATES):
            rows = slice(g * hidden, (g + 1) * hidden)
            gb = bias[d, rows] + bias[d, 4 * hidden + g * hidden:4 * hidden + (g + 1) * hidden]
            xw = b.op("matmul", [flat, b.const(w[d, rows].t().contiguous(), f"{ctx.label}.w_{name}{d}")])
            xw = b.reshape(b.op("add", [xw, b.const(gb.reshape(1, hidden), f"{ctx.label}.b_{name}{d}")]),
                           (steps, batch, hidden))
            gates[name] = (xw, b.const(r[d, rows].t().contiguous(), f"{ctx.label}.r_{name}{d}"))
        h, c = initial(5, d), initial(6, d)
        outs: List[Any] = [None] * steps
        for t in (reversed(range(steps)) if reverse else range(steps)):
            pre = {n: b.op("add", [b.reshape(_index_range(b, xw, 0, t, t + 1), (batch, hidden)),
                                   b.op("matmul", [h, rw])]) for n, (xw, rw) in gates.items()}
            i, f, o = (b.op("sigmoid", [pre[n]]) for n in "ifo")
            c = b.op("add", [b.op("multiply", [f, c]), b.op("multiply", [i, b.op("tanh", [pre["c"]])])])
            h = b.op("multiply", [o, b.op("tanh", [c])])
            outs[t] = b.reshape(h, (1, 1, batch, hidden))
        ys.append(outs[0] if steps == 1 else b.op("concatenate", outs, axis=0))
        last_h.append(b.reshape(h, (1, batch, hidden)))
        last_c.append(b.reshape(c, (1, batch, hidden)))
    y = ys[0] if dirs == 1 else b.op("concatenate", ys, axis=1)  # [S, D, B, H]
    y_h = last_h[0] if dirs == 1 else b.op("concatenate", last_h, axis=0)  # [D, B, H]
    y_c = last_c[0] if dirs == 1 else b.op("concatenate", last_c, axis=0)
    if layout:
        y, y_h, y_c = _permute_by(b, y, [2, 0, 1, 3]), _permute_by(b, y_h, [1, 0, 2]), _permute_by(b, y_c, [1, 0, 2])
    return [y, y_h, y_c]
