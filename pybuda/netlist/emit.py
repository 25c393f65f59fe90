"""Write a :class:`~pybuda.netlist.model.Netlist` as netlist YAML (netlist_backend_spec §1).

The output is deterministic: sections in the order devices, queues, graphs, programs, fused_ops; one
queue or op per line as a flow map with keys in the order of the spec's example; op attributes in a
fixed canonical order; DRAM/host addresses in hex. Equal netlists give byte-identical text, so golden
YAML files can be snapshot-tested. The writer is hand-rolled rather than ``yaml.dump`` because PyYAML
cannot mix block and flow style per node or print integers in hex.
"""

from __future__ import annotations

import enum
import math
import os
import re
from typing import Any, Dict, Iterable, List, Tuple, Union

from pybuda.netlist.model import (
    AllocateQueue, DeallocateQueue, EndLoop, Execute, FusedOpDef, FusedSubOp, GraphDef, Loop, Netlist, NetlistOp,
    Param, Program, QueueDef, QueueSetting, StaticVar, Var, VarInst,
)
from pybuda.netlist.tms import TM, InputPad, InputUnpad

#: Canonical order of op attributes in the output; ``inputN`` (splice) follow by index, then any others.
ATTRIBUTE_ORDER: Tuple[str, ...] = (
    "m_k", "u_kt", "bias", "accumulate", "z", "identity", "num_index_tiles", "num_sparse_tiles", "num_columns",
    "sparse_tile_ptr_bits", "sparse_ublock_idx_bits", "indices_len", "fracture_factor", "starting_row",
    "act_t", "num_nz_strips", "min_buffer_input", "l1_acc", "requant", "dequant", "zero_point", "sfpu_op",
    "sfpu_execution_thread", "approximate_mode", "vector", "type", "dim", "p", "seed", "slope", "exp",
    "fused_op_id", "granularity", "num_indices", "k", "sort", "kreduce", "kernel_broadcast",
    "kernel_broadcast_per_t", "single_tile", "relu_en", "relu_threshold", "relu_mode", "stoch_rnd_mode",
    "srnd_fpu_en", "ingress_channels", "egress_channels", "dest_device",
)

_PLAIN = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$.\-/]*$")
_RESERVED = {"true", "false", "yes", "no", "on", "off", "null", "y", "n"}


class Hex(int):
    """An int written in hex (DRAM/host addresses)."""


def _str(value: str) -> str:
    if _PLAIN.match(value) and value.lower() not in _RESERVED:
        return value
    # JSON string syntax is valid YAML double-quoted syntax.
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _float(value: float) -> str:
    if math.isnan(value):
        return ".nan"
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    text = repr(float(value))
    # YAML 1.1 (PyYAML) reads "1e-05" as a string: it wants a dot in the mantissa and a signed exponent.
    if "e" in text:
        mantissa, exp = text.split("e")
        if "." not in mantissa:
            mantissa += ".0"
        if exp[0] not in "+-":
            exp = "+" + exp
        text = f"{mantissa}e{exp}"
    return text


def _flow(value: Any) -> str:
    """One value in YAML flow style."""
    # Most values are plain ints, strings and lists: those are told by their exact type first. A bool, a
    # Hex, an enum or a TM (subclasses of int, str or tuple, or not plain) takes the checks below.
    kind = type(value)
    if kind is int:
        return str(value)
    if kind is str:
        return _str(value)
    if kind is list or kind is tuple:
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Hex):
        return f"0x{int(value):x}"
    if isinstance(value, enum.Enum):
        return _str(value.name)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, str):
        return _str(value)
    if value is None:
        return "null"
    if isinstance(value, TM):
        return _flow(value.to_obj())
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_flow(k)}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} {value!r} to a netlist")


def _flow_map(items: Iterable[Tuple[str, Any]]) -> str:
    return "{" + ", ".join(f"{_str(k)}: {_flow(v)}" for k, v in items) + "}"


def _addresses(allocs: Iterable[Tuple[int, int]]) -> List[List[Any]]:
    return [[int(ch), Hex(addr)] for ch, addr in allocs]


# ---------------------------------------------------------------------------------------------------


def queue_items(q: QueueDef) -> List[Tuple[str, Any]]:
    """The (key, value) pairs of a queue in output order."""
    items: List[Tuple[str, Any]] = [
        ("input", q.input), ("type", q.type), ("entries", q.entries), ("grid_size", q.grid_size), ("t", q.t),
        ("mblock", q.mblock), ("ublock", q.ublock), ("ublock_order", q.ublock_order),
    ]
    if q.tile_dim is not None:
        items.append(("tile_dim", q.tile_dim))
    items.append(("df", q.df))
    if q.layout is not None:
        items.append(("layout", q.layout))
    if q.alias is not None:
        items.append(("alias", q.alias))
    if q.input_tms:
        items.append(("input_tms", list(q.input_tms)))
    items += [("target_device", q.target_device), ("loc", q.loc)]
    if q.dram is not None:
        items.append(("dram", _addresses(q.dram)))
    if q.host is not None:
        items.append(("host", _addresses(q.host)))
    if q.read_ports is not None:
        items.append(("read_ports", q.read_ports))
    if q.write_ports is not None:
        items.append(("write_ports", q.write_ports))
    return items


def _attr_key(key: str) -> Tuple[int, int, str]:
    if key in ATTRIBUTE_ORDER:
        return (0, ATTRIBUTE_ORDER.index(key), key)
    m = re.fullmatch(r"input(\d+)", key)
    if m:
        return (1, int(m.group(1)), key)
    return (2, 0, key)


def ordered_attributes(attrs: Dict[str, Any]) -> Dict[str, Any]:
    """``attrs`` re-ordered canonically (kernel_broadcast maps sorted by input index)."""
    out: Dict[str, Any] = {}
    for key in sorted(attrs, key=_attr_key):
        value = attrs[key]
        if key in ("kernel_broadcast", "kernel_broadcast_per_t") and isinstance(value, dict):
            value = {k: value[k] for k in sorted(value, key=lambda s: _attr_key(str(s).replace("_", "")))}
        out[key] = value
    return out


def op_items(op: NetlistOp) -> List[Tuple[str, Any]]:
    """The (key, value) pairs of an op in output order."""
    items: List[Tuple[str, Any]] = [("type", op.type)]
    if op.grid_loc is not None:
        items.append(("grid_loc", op.grid_loc))
    items.append(("grid_size", op.grid_size))
    if op.grid_transpose:
        items.append(("grid_transpose", True))
    items += [
        ("inputs", list(op.inputs)), ("in_df", list(op.in_df)), ("out_df", op.out_df),
        ("intermed_df", op.intermed_df), ("acc_df", op.acc_df), ("math_fidelity", op.math_fidelity),
        ("t", op.t), ("mblock", op.mblock), ("ublock", op.ublock), ("ublock_order", op.ublock_order),
    ]
    if op.tile_dim is not None:
        items.append(("tile_dim", op.tile_dim))
    items.append(("buf_size_mb", op.buf_size_mb))
    if op.input_buf_min_size_tiles is not None:
        items.append(("input_buf_min_size_tiles", op.input_buf_min_size_tiles))
    if op.input_dram_io_buf_size_tiles is not None:
        items.append(("input_dram_io_buf_size_tiles", op.input_dram_io_buf_size_tiles))
    if op.overlay_size is not None:
        items.append(("overlay_size", op.overlay_size))
    if op.untilize_output:
        items.append(("untilize_output", True))
    if op.gradient_op:
        items.append(("gradient_op", True))
    if op.forked_dram_inputs:
        items.append(("forked_dram_inputs", [{q: o} for q, o in op.forked_dram_inputs]))
    for index in sorted(op.input_tms):
        if op.input_tms[index]:
            items.append((f"input_{index}_tms", list(op.input_tms[index])))
    for index in sorted(op.input_pad):
        p: InputPad = op.input_pad[index]
        items.append((f"input_{index}_pad", {"rt": p.rt, "ct": p.ct, "pad_value": float(p.pad_value)}))
    for index in sorted(op.input_unpad):
        u: InputUnpad = op.input_unpad[index]
        items.append((f"input_{index}_unpad", {"rt": u.rt, "ct": u.ct}))
    if op.attributes:
        items.append(("attributes", ordered_attributes(op.attributes)))
    return items


def _setting_items(s: QueueSetting) -> List[Tuple[str, Any]]:
    keys = ("prologue", "epilogue", "zero", "rd_ptr_local", "rd_ptr_global", "wr_ptr_global", "rd_ptr_autoinc",
            "global_rdptr_autoinc", "global_wrptr_autoinc", "read_only")
    return [(k, getattr(s, k)) for k in keys if getattr(s, k) is not None]


def _instruction(instr: Any, indent: str) -> List[str]:
    if isinstance(instr, EndLoop):
        return [f"{indent}- endloop"]
    if isinstance(instr, Param):
        return [f"{indent}- param: {_flow(list(instr.names))}"]
    if isinstance(instr, (Var, StaticVar)):
        key = "var" if isinstance(instr, Var) else "staticvar"
        value = list(instr.values) if instr.as_list else instr.values
        return [f"{indent}- {key}: {_flow(value)}"]
    if isinstance(instr, VarInst):
        return [f"{indent}- varinst: {_flow([instr.out, instr.op, *instr.args])}"]
    if isinstance(instr, Loop):
        return [f"{indent}- loop: {_flow(instr.count)}"]
    if isinstance(instr, AllocateQueue):
        return [f"{indent}- allocate_queue: {_flow(list(instr.names))}"]
    if isinstance(instr, DeallocateQueue):
        return [f"{indent}- deallocate_queue: {_flow(list(instr.names))}"]
    if isinstance(instr, Execute):
        head = f"{indent}- execute: {{graph_name: {_str(instr.graph_name)}"
        if not instr.queue_settings:
            return [head + "}"]
        lines = [head + ", queue_settings: {"]
        names = list(instr.queue_settings)
        for i, name in enumerate(names):
            tail = "}}" if i == len(names) - 1 else ","
            lines.append(f"{indent}    {_str(name)}: {_flow_map(_setting_items(instr.queue_settings[name]))}{tail}")
        return lines
    raise TypeError(f"unknown program instruction {instr!r}")


def _sub_op_items(sub: FusedSubOp) -> List[Tuple[str, Any]]:
    items: List[Tuple[str, Any]] = [("type", sub.type), ("inputs", list(sub.inputs))]
    for index in sorted(sub.input_tms):
        if sub.input_tms[index]:
            items.append((f"input_{index}_tms", list(sub.input_tms[index])))
    items += [("mblock", sub.mblock), ("ublock", sub.ublock), ("output", sub.output)]
    if sub.pop:
        items.append(("pop", list(sub.pop)))
    if sub.pop_last:
        items.append(("pop_last", list(sub.pop_last)))
    if sub.zero_point is not None:
        items.append(("zero_point", float(sub.zero_point)))
    if sub.attributes:
        items.append(("attributes", ordered_attributes(sub.attributes)))
    return items


def to_yaml(netlist: Netlist) -> str:
    """The netlist as YAML text (deterministic; see the module docstring)."""
    out: List[str] = []
    arch = netlist.devices_arch
    out.append(f"devices: {{arch: {_flow(list(arch) if isinstance(arch, tuple) else arch)}}}")
    out.append("")
    out.append("queues:")
    for name, q in netlist.queues.items():
        out.append(f"  {_str(name)}: {_flow_map(queue_items(q))}")
    out.append("")
    out.append("graphs:")
    for gname, graph in netlist.graphs.items():
        g: GraphDef = graph
        out.append(f"  {_str(gname)}:")
        out.append(f"    target_device: {_flow(g.target_device)}")
        out.append(f"    input_count: {g.input_count}")
        for oname, op in g.ops.items():
            out.append(f"    {_str(oname)}: {_flow_map(op_items(op))}")
    out.append("")
    out.append("programs:")
    for prog in netlist.programs:
        p: Program = prog
        if not p.instructions:
            out.append(f"  - {_str(p.name)}: []")
            continue
        out.append(f"  - {_str(p.name)}:")
        for instr in p.instructions:
            out.extend(_instruction(instr, "    "))
    if netlist.fused_ops:
        out.append("")
        out.append("fused_ops:")
        for fid in sorted(netlist.fused_ops):
            f: FusedOpDef = netlist.fused_ops[fid]
            out.append(f"  {int(fid)}:")
            out.append(f"    inputs: {f.inputs}")
            out.append(f"    intermediates: {f.intermediates}")
            if f.custom_kernel_path is not None:
                out.append(f"    custom_kernel_path: {_str(f.custom_kernel_path)}")
            if not f.schedules:
                out.append("    schedules: []")
                continue
            out.append("    schedules:")
            for schedule in f.schedules:
                if not schedule:
                    out.append("      - []")
                    continue
                out.append("      -")
                for sub in schedule:
                    out.append(f"        - {_str(sub.name)}: {_flow_map(_sub_op_items(sub))}")
    return "\n".join(out) + "\n"


def write(netlist: Netlist, path: Union[str, "os.PathLike[str]"]) -> None:
    """Write :func:`to_yaml` of ``netlist`` to ``path`` (UTF-8)."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(to_yaml(netlist))
