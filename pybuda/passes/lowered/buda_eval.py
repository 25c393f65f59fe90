"""A float32 reference evaluator of a lowered :class:`BudaGraph` (no data formats, no fidelity).

It executes the lowered ops with the semantics the netlist promises (tile TMs, sparse pickers, reduce,
matmul bias from row 0 of each tile, relu attributes, fused-op schedules), one sample at a time, so the
compiler can check that lowering preserved the model's numerics before any backend exists
(``VerifyConfig.verify_each_buda_pass`` / tests). It is deliberately simple, not fast.
"""

from __future__ import annotations

from typing import Dict, List, Mapping

import torch
import torch.nn.functional as F

from pybuda.ir.lowered import BudaGraph, BudaOp
from pybuda.netlist.host_io import from_device_layout, to_device_layout
from pybuda.passes.lower.pickers import sparse_matmul
from pybuda.netlist.tms import apply_tms

TILE = 32


def evaluate_buda_graph(bg: BudaGraph, inputs: Mapping[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """Run ``bg`` on framework input tensors (by input queue name); returns framework outputs by name."""
    data: Dict[str, torch.Tensor] = {}
    entries = None
    for name in bg.input_order:
        q = bg.queues[name]
        data[name] = to_device_layout(q, inputs[name]).to(torch.float32)
        entries = data[name].shape[0] if entries is None else entries
    for name, q in bg.queues.items():
        if q.kind in ("parameter", "constant"):
            value = bg.tensors[name]
            d = to_device_layout(q, value)
            data[name] = d if not d.dtype.is_floating_point else d.to(torch.float32)
    entries = entries or 1
    outs: Dict[str, List[torch.Tensor]] = {n: [] for n in bg.output_order}
    with torch.no_grad():
        for s in range(entries):
            vals: Dict[str, torch.Tensor] = {}
            for name, d in data.items():
                vals[name] = d[s] if bg.queues[name].kind == "input" else d[0]
            for op in bg.ops.values():
                ins = [apply_tms(vals[i], op.input_tms.get(k, [])) if vals[i].dtype.is_floating_point else vals[i]
                       for k, i in enumerate(op.inputs)]
                vals[op.name] = evaluate_op(op, ins, bg)
            for name in bg.output_order:
                outs[name].append(vals[bg.queues[name].producer])
    return {name: from_device_layout(bg.queues[name], torch.stack(v)) for name, v in outs.items()}


def _row0(t: torch.Tensor) -> torch.Tensor:
    """Row 0 of every tile broadcast within the tile (matmul bias semantics)."""
    z, r, c = t.shape
    tiles = t.reshape(z, r // TILE, TILE, c)
    return tiles[:, :, 0:1, :].expand(tiles.shape).reshape(t.shape)


UNARY = {
    "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "reciprocal": torch.reciprocal,
    "sigmoid": torch.sigmoid, "tanh": torch.tanh, "sine": torch.sin, "cosine": torch.cos, "abs": torch.abs,
    "square": lambda x: x * x, "nop": lambda x: x, "datacopy": lambda x: x,
}


def _relu(x: torch.Tensor, attrs) -> torch.Tensor:
    if not attrs.get("relu_en"):
        return x
    thr = float(attrs.get("relu_threshold", 0.0))
    zero = torch.zeros((), dtype=x.dtype)
    if attrs.get("relu_mode", "min") == "min":
        return torch.where(x >= thr, x, zero)
    return torch.where(x <= thr, x, zero)


def _unary(op_type: str, x: torch.Tensor, attrs) -> torch.Tensor:
    if op_type in UNARY:
        return UNARY[op_type](x)
    if op_type == "gelu":
        return F.gelu(x, approximate="tanh" if attrs.get("approximate_mode") else "none")
    if op_type == "lrelu":
        return F.leaky_relu(x, attrs.get("slope", 0.01))
    if op_type == "power":
        return torch.pow(x, int(attrs.get("exp", 1)))
    if op_type == "dropout":
        return x
    raise ValueError(f"no reference for unary op '{op_type}'")


def _binary(op_type: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return {"add": torch.add, "subtract": torch.sub, "multiply": torch.mul, "maximum": torch.maximum}[op_type](a, b)


def evaluate_op(op: BudaOp, ins: List[torch.Tensor], bg: BudaGraph) -> torch.Tensor:
    """One lowered op on ``[z, R, C]`` inputs (TMs already applied)."""
    a = op.attrs
    t = op.type
    if t == "matmul" and a.get("identity"):
        out = sparse_matmul(ins[0], ins[2], int(a["indices_len"]), ins[1], op.shape.rt, op.shape.z)
    elif t == "matmul":
        out = torch.matmul(ins[0], ins[1])
        if a.get("bias"):
            out = out + _row0(ins[2])
        if a.get("sfpu_op") == "gelu":
            out = F.gelu(out)
    elif t in ("add", "subtract", "multiply", "maximum"):
        out = _binary(t, ins[0], ins[1])
    elif t == "reduce":
        x = ins[0]
        d = a["dim"]
        if d == "z":
            f = int(a["z"])
            out = x.reshape(x.shape[0] // f, f, *x.shape[1:]).amax(1)
        elif d == "r":
            m = x.amax(-2, keepdim=True)
            out = torch.zeros(x.shape[0], TILE, x.shape[2])
            out[:, 0:1, :] = m
        else:
            m = x.amax(-1, keepdim=True)
            out = torch.zeros(x.shape[0], x.shape[1], TILE)
            out[:, :, 0:1] = m
    elif t == "fused_op":
        out = _fused(op, ins, bg)
    else:
        out = _unary(t, ins[0], a)
    return _relu(out, a)


def _fused(op: BudaOp, ins: List[torch.Tensor], bg: BudaGraph) -> torch.Tensor:
    spec = bg.fused_ops[op.attrs["fused_op_id"]]
    buffers: Dict[str, torch.Tensor] = {f"input{i}": x for i, x in enumerate(ins)}
    result = None
    for schedule in spec["schedules"]:
        for entry in schedule:
            for name, sub in entry.items():
                xs = [apply_tms(buffers[n], sub.get("input_tms", {}).get(k, [])) for k, n in enumerate(sub["inputs"])]
                fake = BudaOp(name, sub["type"], [], op.shape, attrs=dict(sub.get("attributes", {})))
                val = evaluate_op(fake, xs, bg)
                buffers[sub["output"]] = val
                if sub["output"] == "output":
                    result = val
    return result
