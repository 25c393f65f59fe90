"""Fold the ops that follow a matmul into it, as TT-Buda's pre-lowering fusions did.

- ``matmul`` -> ``add`` of a row-replicated bias (a parameter/constant the lowering stored with every row of
  its tile equal, tags ``transform: rep_r``) becomes a matmul with ``bias: true`` and the bias as input 2
  (keeping the add's TMs on it). The backend adds row 0 of each bias tile to every row, which equals the
  add only because every row is the same - full-matrix biases are left alone.
- ``matmul`` -> ``gelu`` becomes ``sfpu_op: gelu`` (the one SFPU op the backend fuses into a matmul);
  approximate-mode gelu is not fused.
- any op -> ``nop`` carrying only ``relu_*`` attributes moves the relu onto the producer (every op accepts
  ``relu_en``; the backend applies it last).

Each fusion needs the intermediate value to have exactly one reader (no other op, no queue).
"""

from __future__ import annotations

from typing import Dict, List

from pybuda.netlist.tms import Transpose, as_tms
from pybuda.ir.lowered import BudaGraph, BudaOp
from pybuda.passes.context import CompileContext
from pybuda.passes.lowered.overrides import pinned_ops

RELU_KEYS = ("relu_en", "relu_threshold", "relu_mode")


def fuse_matmul_epilogues(bg: BudaGraph, ctx: CompileContext) -> BudaGraph:
    """Fold bias adds, gelu and relu into their producers (in place); returns ``bg``."""
    counts = {"bias": 0, "gelu": 0, "relu": 0}
    readers = bg.reader_map()  # kept up to date by _absorb, fusion by fusion
    for kind, fn in (("bias", _try_bias), ("gelu", _try_gelu), ("relu", _try_relu)):
        for op in list(bg.ops.values()):
            if op.name not in bg.ops:
                continue
            if fn(bg, op, readers, ctx):
                counts[kind] += 1
    ctx.notes["fused_epilogues"] = counts
    return bg



def _sole_reader(bg: BudaGraph, name: str, readers) -> BudaOp:
    users = readers.get(name, [])
    if len(users) != 1 or users[0] not in bg.ops:
        return None
    return bg.ops[users[0]]


def _can_absorb(keep: BudaOp, gone: BudaOp, ctx: CompileContext) -> bool:
    """A matmul does not take over an output nop's untilize job (it would need m_k == 1); an op named by a
    break, an override or ``dont_fuse``, and a buffering nop, keep their identity (their name would vanish)."""
    if gone.tags.get("buffering_nop") or gone.name in ctx.config.op_names_dont_fuse or gone.name in pinned_ops(ctx):
        return False
    return not (gone.untilize_output and keep.type in ("matmul", "reduce"))


def _absorb(bg: BudaGraph, keep: BudaOp, gone: BudaOp, readers: Dict[str, List[str]]) -> None:
    """Remove ``gone`` (which read ``keep``, whose inputs may have grown by one of ``gone``'s); its readers
    now read ``keep``. ``readers`` (``bg.reader_map()``) is updated to match, touching only these ops."""
    del bg.ops[gone.name]
    users = readers.pop(gone.name, [])
    for name in users:
        if name in bg.ops:
            bg.ops[name].inputs = [keep.name if i == gone.name else i for i in bg.ops[name].inputs]
        q = bg.queues.get(name)
        if q is not None and q.producer == gone.name:
            q.producer = keep.name
    for name in set(gone.inputs):  # keep among them: gone read it
        readers[name] = [r for r in readers.get(name, []) if r != gone.name]
    for name in set(keep.inputs):
        if keep.name not in readers.setdefault(name, []):
            readers[name].append(keep.name)
    readers.setdefault(keep.name, []).extend(users)
    keep.untilize_output = keep.untilize_output or gone.untilize_output
    keep.tags.setdefault("fused_epilogue", []).append(gone.name)
    if gone.tags.get("output_nop"):
        keep.tags["output_nop"] = True


def _try_bias(bg: BudaGraph, op: BudaOp, readers, ctx) -> bool:
    if op.type != "matmul" or op.attrs.get("identity") or op.attrs.get("bias") or op.tags.get("picker"):
        return False
    add = _sole_reader(bg, op.name, readers)
    if add is None or add.type != "add" or add.attrs or not _can_absorb(op, add, ctx):
        return False
    if add.inputs[0] == op.name and add.inputs[1] != op.name:
        bias_index = 1
    elif add.inputs[1] == op.name and add.inputs[0] != op.name:
        bias_index = 0
    else:
        return False
    if add.input_tms.get(1 - bias_index):
        return False
    bias = add.inputs[bias_index]
    q = bg.queues.get(bias)
    if q is None or q.tags.get("transform") != "rep_r":
        return False
    tms = list(add.input_tms.get(bias_index, []))
    if any(isinstance(tm, Transpose) for tm in as_tms(tms)):
        return False
    op.inputs.append(bias)
    if tms:
        op.input_tms[2] = tms
    op.attrs["bias"] = True
    _absorb(bg, op, add, readers)
    return True


def _try_gelu(bg: BudaGraph, op: BudaOp, readers, ctx) -> bool:
    if op.type != "matmul" or op.attrs.get("identity") or op.attrs.get("sfpu_op") or op.tags.get("picker"):
        return False
    if any(k in op.attrs for k in RELU_KEYS):
        return False
    g = _sole_reader(bg, op.name, readers)
    if g is None or g.type != "gelu" or g.attrs.get("approximate_mode") or g.input_tms or not _can_absorb(op, g, ctx):
        return False
    if any(k not in RELU_KEYS for k in g.attrs):
        return False
    op.attrs["sfpu_op"] = "gelu"
    op.attrs.update({k: v for k, v in g.attrs.items() if k in RELU_KEYS})
    _absorb(bg, op, g, readers)
    return True


def _try_relu(bg: BudaGraph, op: BudaOp, readers, ctx) -> bool:
    if any(k in op.attrs for k in RELU_KEYS) or op.type == "fused_op":
        return False
    r = _sole_reader(bg, op.name, readers)
    if r is None or r.type != "nop" or not r.attrs.get("relu_en") or r.input_tms or not _can_absorb(op, r, ctx):
        return False
    if any(k not in RELU_KEYS for k in r.attrs):
        return False
    op.attrs.update({k: r.attrs[k] for k in RELU_KEYS if k in r.attrs})
    _absorb(bg, op, r, readers)
    return True
