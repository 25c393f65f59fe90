"""ONNX's recurrent layers on the device: LSTM and GRU unrolled over their (static) sequence into matmuls and
activations.

The torch frontend sees ``nn.LSTM`` / ``nn.GRU`` decomposed by ``torch.export`` into exactly these per-step ops; the
ONNX exporter keeps one LSTM or GRU node, which ran on the host. Weights must be initializers (they are split per
gate and transposed at import); peepholes, ``clip``, ``input_forget``, non-default activations and sequence lengths
shorter than the sequence stay on the host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Sequence, Tuple

import torch

from pybuda.frontend.aten_builder import Unsupported
from pybuda.frontend.aten_shape import _index_range, _permute_by
from pybuda.frontend.onnx.converter import NodeCtx, converts

#: ONNX's gate order in W, R and B.
_LSTM_GATES = "iofc"
_GRU_GATES = "zrh"


@dataclass
class _Unrolled:
    """What an LSTM and a GRU node share: the sequence as ``[steps * batch, features]`` rows, the per-direction
    weights split per gate, and the initial states."""

    ctx: NodeCtx
    dt: torch.dtype
    hidden: int
    direction: str
    dirs: int
    layout: int
    steps: int
    batch: int
    flat: str
    w: torch.Tensor
    r: torch.Tensor
    bias: torch.Tensor

    def input_gates(self, d: int, gates: str) -> Dict[str, Tuple[str, str, torch.Tensor]]:
        """Per gate of direction ``d``: ``(x W^T + Wb as [steps, batch, hidden], R^T as a constant, Rb)``."""
        b, h, n = self.ctx.b, self.hidden, len(gates)
        out = {}
        for g, name in enumerate(gates):
            rows = slice(g * h, (g + 1) * h)
            label = f"{self.ctx.label}.{name}{d}"
            xw = b.op("matmul", [self.flat, b.const(self.w[d, rows].t().contiguous(), f"{label}.w")])
            xw = b.op("add", [xw, b.const(self.bias[d, rows].reshape(1, h), f"{label}.wb")])
            rb = self.bias[d, n * h + g * h:n * h + (g + 1) * h]
            out[name] = (b.reshape(xw, (self.steps, self.batch, h)),
                         b.const(self.r[d, rows].t().contiguous(), f"{label}.r"), rb)
        return out

    def step_input(self, xw: str, t: int) -> str:
        return self.ctx.b.reshape(_index_range(self.ctx.b, xw, 0, t, t + 1), (self.batch, self.hidden))

    def initial(self, k: int, d: int) -> str:
        b = self.ctx.b
        if not self.ctx.has(k):
            return b.const(torch.zeros(self.batch, self.hidden, dtype=self.dt), f"{self.ctx.label}.zeros")
        return b.reshape(_index_range(b, self.ctx.x(k, self.dt), 1 if self.layout else 0, d, d + 1),
                         (self.batch, self.hidden))

    def order(self, d: int) -> Sequence[int]:
        reverse = self.direction == "reverse" or d == 1
        return range(self.steps - 1, -1, -1) if reverse else range(self.steps)

    def outputs(self, per_direction: List[Tuple[List[str], List[str]]]) -> List[str]:
        """``[Y, Y_h(, Y_c)]`` from each direction's per-step hidden states and final states."""
        b, batch, h = self.ctx.b, self.batch, self.hidden
        ys = []
        for outs, _ in per_direction:
            steps = [b.reshape(o, (1, 1, batch, h)) for o in outs]
            ys.append(steps[0] if len(steps) == 1 else b.op("concatenate", steps, axis=0))
        results = [ys[0] if self.dirs == 1 else b.op("concatenate", ys, axis=1)]  # [S, D, B, H]
        for k in range(len(per_direction[0][1])):
            finals = [b.reshape(states[k], (1, batch, h)) for _, states in per_direction]
            results.append(finals[0] if self.dirs == 1 else b.op("concatenate", finals, axis=0))  # [D, B, H]
        if self.layout:
            results = [_permute_by(b, results[0], [2, 0, 1, 3])] + [_permute_by(b, s, [1, 0, 2]) for s in results[1:]]
        return results


def _unrolled(ctx: NodeCtx, kind: str, gates: int, acts_default: List[str]) -> _Unrolled:
    b, dt = ctx.b, ctx.dtype(0)
    if not dt.is_floating_point:
        raise Unsupported(f"{kind} on {str(dt).replace('torch.', '')} data")
    hidden = ctx.attr("hidden_size", types=(int,))
    direction = ctx.attr("direction", "forward", (str,), choices=("forward", "reverse", "bidirectional"))
    layout = ctx.attr("layout", 0, (int,), choices=(0, 1))
    dirs = 2 if direction == "bidirectional" else 1
    acts = ctx.attr("activations", None)
    ctx.attr("activation_alpha", None), ctx.attr("activation_beta", None)
    if acts is not None and [a.lower() for a in acts] != acts_default * dirs:
        raise Unsupported(f"{kind} with activations {acts} (the device unrolls {'/'.join(acts_default)})")
    if ctx.attr("clip", None) is not None:
        raise Unsupported(f"{kind} with clip")
    w, r = ctx.const(1, "W").to(dt), ctx.const(2, "R").to(dt)
    bias = ctx.const(3, "B").to(dt) if ctx.has(3) else torch.zeros(dirs, 2 * gates * hidden, dtype=dt)
    shape = ctx.shape(0)
    steps, batch, features = (shape[1], shape[0], shape[2]) if layout else shape
    if ctx.has(4) and bool((ctx.const(4, "sequence_lens") != steps).any()):
        raise Unsupported(f"{kind} with sequence lengths shorter than the sequence")
    x = _permute_by(b, ctx.x(0, dt), [1, 0, 2]) if layout else ctx.x(0, dt)
    return _Unrolled(ctx, dt, hidden, direction, dirs, layout, steps, batch, b.reshape(x, (steps * batch, features)),
                     w, r, bias)


@converts("LSTM")
def _lstm(ctx: NodeCtx):
    if ctx.attr("input_forget", 0, (int,)) or ctx.has(7):
        raise Unsupported("LSTM with input_forget or peepholes")
    u = _unrolled(ctx, "LSTM", 4, ["sigmoid", "tanh", "tanh"])
    b = ctx.b
    per_direction = []
    for d in range(u.dirs):
        gates = u.input_gates(d, _LSTM_GATES)
        h, c = u.initial(5, d), u.initial(6, d)
        outs: List[Any] = [None] * u.steps
        for t in u.order(d):
            pre = {n: b.op("add", [u.step_input(xw, t), _recurrent(b, h, rw, rb, f"{ctx.label}.{n}{d}")])
                   for n, (xw, rw, rb) in gates.items()}
            i, f, o = (b.op("sigmoid", [pre[n]]) for n in "ifo")
            c = b.op("add", [b.op("multiply", [f, c]), b.op("multiply", [i, b.op("tanh", [pre["c"]])])])
            h = b.op("multiply", [o, b.op("tanh", [c])])
            outs[t] = h
        per_direction.append((outs, [h, c]))
    return u.outputs(per_direction)


@converts("GRU")
def _gru(ctx: NodeCtx):
    """``Ht = (1 - z) h~ + z Ht-1`` with ``h~ = tanh(x Wh + r (Ht-1 Rh + Rbh) + Wbh)`` when ``linear_before_reset``
    (torch's GRU), ``tanh(x Wh + (r Ht-1) Rh + Rbh + Wbh)`` otherwise."""
    before = ctx.attr("linear_before_reset", 0, (int,), choices=(0, 1))
    u = _unrolled(ctx, "GRU", 3, ["sigmoid", "tanh"])
    b = ctx.b
    per_direction = []
    for d in range(u.dirs):
        gates = u.input_gates(d, _GRU_GATES)
        h = u.initial(5, d)
        outs: List[Any] = [None] * u.steps
        for t in u.order(d):
            z, r = (b.op("sigmoid", [b.op("add", [u.step_input(gates[n][0], t),
                                                  _recurrent(b, h, gates[n][1], gates[n][2], f"{ctx.label}.{n}{d}")])])
                    for n in "zr")
            xh, rh, rbh = gates["h"]
            if before:
                recur = b.op("multiply", [r, _recurrent(b, h, rh, rbh, f"{ctx.label}.h{d}")])
            else:
                recur = _recurrent(b, b.op("multiply", [r, h]), rh, rbh, f"{ctx.label}.h{d}")
            cand = b.op("tanh", [b.op("add", [u.step_input(xh, t), recur])])
            h = b.op("add", [cand, b.op("multiply", [z, b.op("subtract", [h, cand])])])  # (1 - z) h~ + z Ht-1
            outs[t] = h
        per_direction.append((outs, [h]))
    return u.outputs(per_direction)


def _recurrent(b: Any, h: str, rw: str, rb: torch.Tensor, label: str) -> str:
    """``h R^T + Rb`` (the bias skipped where it is zero)."""
    out = b.op("matmul", [h, rw])
    if not bool(rb.any()):
        return out
    return b.op("add", [out, b.const(rb.reshape(1, -1), f"{label}.rb")])

