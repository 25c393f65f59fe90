"""Runs a lowered :class:`BudaGraph` in float32 with the golden's op semantics (no formats, no fidelity).

The compiler checks that lowering preserved the model's numerics before any placement exists
(``VerifyConfig.verify_each_buda_pass``, the last-stage verify, tests). This is not a second interpreter:
every op runs through :func:`pybuda.golden.device.run_op` in float32, the code path the golden device
takes per op in ``fast`` mode, and input TMs through the TM code the golden uses (``netlist.tms``). What is
left here is the walk: queues in (through the same host layout as the runtime), ops in schedule order,
outputs back.

Shapes: the lowered graph's ``[z, R, C]`` per sample is the golden's ``[N, t, R, C]`` with all samples
as N (``z`` is the op's ``t``); parameters and constants have N = 1, as in the golden.
"""

from __future__ import annotations

from typing import Dict, Mapping

import torch

from pybuda.golden.device import run_op
from pybuda.ir.lowered import BudaGraph
from pybuda.netlist.generate import fused_op_def
from pybuda.netlist.host_io import from_device_layout, queue_io, to_device_layout
from pybuda.netlist.model import FusedOpDef, TileShape3
from pybuda.netlist.tms import apply_tms


def evaluate_buda_graph(bg: BudaGraph, inputs: Mapping[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """Run ``bg`` on framework input tensors (by input queue name); returns framework outputs by name."""
    values: Dict[str, torch.Tensor] = {}
    for name in bg.input_order:
        values[name] = to_device_layout(queue_io(bg.queues[name]), inputs[name]).to(torch.float32)
    entries = values[bg.input_order[0]].shape[0] if bg.input_order else 1
    for name, q in bg.queues.items():
        if q.kind in ("parameter", "constant"):
            values[name] = to_device_layout(queue_io(q), bg.tensors[name], rounded=False).to(torch.float32)
    fused: Dict[int, FusedOpDef] = {}
    with torch.no_grad():
        for op in bg.ops.values():
            ins = [apply_tms(values[src], op.input_tms.get(k, ())) for k, src in enumerate(op.inputs)]
            fdef = None
            if op.type == "fused_op":
                fid = op.attrs["fused_op_id"]
                if fid not in fused:
                    fused[fid] = fused_op_def(bg.fused_ops[fid], fid)
                fdef = fused[fid]
            shape = TileShape3(op.shape.z, op.shape.rt, op.shape.ct)
            values[op.name] = run_op(op.type, op.attrs, ins, shape, entries, fused=fdef, name=op.name)
    return {name: from_device_layout(queue_io(bg.queues[name]), values[bg.queues[name].producer])
            for name in bg.output_order}
