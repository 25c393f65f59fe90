"""Netlist rules: structure (names, required fields, devices, op types and inputs).

Each ``@rule`` function yields ``(key path, message)`` pairs; :mod:`pybuda.netlist.validate` runs them in
registration order (this module is imported in its place in that order).
"""

from __future__ import annotations

from typing import Optional, Tuple

from pybuda.arch.descriptor import arch_from_netlist_name
from pybuda.netlist.model import BINARY_OPS, COPY_OPS, MATMUL_OPS, NetlistOp, OP_TYPES, SFPU_OPS
from pybuda.netlist.tms import Pad
from pybuda.netlist.limits import size_problems
from pybuda.netlist.rules.framework import Ctx, gate, rule, _o, _positive_pair, _q, _targets, _tms_path
from pybuda.dtypes import DataFormat as DF
from pybuda.dtypes import MathFidelity


@gate
def netlist_sizes(ctx: Ctx):
    """Every size is within the device-independent maxima of :mod:`pybuda.netlist.limits`. Runs first
    and gates the rest: later rules enumerate cores and tiles, which must not start on a 10^5 x 10^5 grid."""
    yield from size_problems(ctx.netlist)


@rule
def sections_nonempty(ctx: Ctx):
    """queues, graphs and programs must not be empty (§1.1)."""
    for section in ("queues", "graphs", "programs"):
        if not getattr(ctx.netlist, section):
            yield section, "must not be empty"


@rule
def devices_arch(ctx: Ctx):
    """Arch names are known; a list needs a selection; the device matches the netlist's arch (§1.1)."""
    archs = ctx.netlist.devices_arch
    names = (archs,) if isinstance(archs, str) else archs
    for name in names:
        try:
            arch_from_netlist_name(name)
        except Exception:
            yield "devices.arch", f"unknown arch {name!r}"
            return
    if ctx.device is not None:
        dev = ctx.device.arch.value
        if not any(arch_from_netlist_name(n) == ctx.device.arch for n in names):
            yield "devices.arch", f"netlist is for {list(names)}, but the device is {dev}"
        elif ctx.netlist.selected_arch is not None and ctx.netlist.selected_arch != dev:
            yield "devices.arch", f"netlist was parsed for {ctx.netlist.selected_arch}, but the device is {dev}"
    elif ctx.arch is None:
        yield "devices.arch", f"lists several archs {list(names)}; pick one (parse_yaml(arch=...) or a device)"


@rule
def target_device_range(ctx: Ctx):
    """target_device ids are >= 0 and, with a device, below its chip count."""
    limit = ctx.device.chip_count if ctx.device else None
    items = [(_q(q.name, "target_device"), q.target_device) for q in ctx.netlist.queues.values()]
    items += [(f"graphs.{g.name}.target_device", g.target_device) for g in ctx.netlist.graphs.values()]
    for path, value in items:
        for dev in _targets(value):
            if not isinstance(dev, int) or dev < 0:
                yield path, f"target_device must be an int >= 0, got {dev!r}"
            elif limit is not None and dev >= limit:
                yield path, f"target_device {dev} does not exist: the device has {limit} chip(s)"


@rule
def names_unique(ctx: Ctx):
    """Op names are unique across graphs and differ from queue names; dict keys match object names."""
    for key, q in ctx.netlist.queues.items():
        if q.name != key:
            yield _q(key), f"queue object is named {q.name!r}, not {key!r}"
    for key, g in ctx.netlist.graphs.items():
        if g.name != key:
            yield f"graphs.{key}", f"graph object is named {g.name!r}, not {key!r}"
        for okey, op in g.ops.items():
            if op.name != okey:
                yield f"graphs.{key}.{okey}", f"op object is named {op.name!r}, not {okey!r}"
    for name, graphs in ctx._op_graphs.items():
        if len(graphs) > 1:
            yield f"graphs.{graphs[1]}.{name}", f"op name is not unique: also in graph {graphs[0]}"
        if name in ctx.netlist.queues:
            yield f"graphs.{graphs[0]}.{name}", "op has the same name as a queue"


@rule
def queue_fields(ctx: Ctx):
    """Queue field values are in range (§1.2)."""
    for q in ctx.netlist.queues.values():
        if not q.input:
            yield _q(q.name, "input"), "input must be HOST or an op name"
        if q.type not in ("queue", "ram"):
            yield _q(q.name, "type"), f"type must be queue or ram, got {q.type!r}"
        if q.loc not in ("dram", "host"):
            yield _q(q.name, "loc"), f"loc must be dram or host, got {q.loc!r}"
        if q.ublock_order not in ("r", "c"):
            yield _q(q.name, "ublock_order"), f"ublock_order must be r or c, got {q.ublock_order!r}"
        if q.layout not in (None, "tilized", "flat"):
            yield _q(q.name, "layout"), f"layout must be tilized or flat, got {q.layout!r}"
        if not isinstance(q.entries, int) or q.entries < 1:
            yield _q(q.name, "entries"), f"entries must be >= 1, got {q.entries!r}"
        if not isinstance(q.t, int) or q.t < 1:
            yield _q(q.name, "t"), f"t must be >= 1, got {q.t!r}"
        for key in ("grid_size", "mblock", "ublock"):
            if not _positive_pair(getattr(q, key)):
                yield _q(q.name, key), f"{key} values must be > 0, got {list(getattr(q, key))}"
        if q.df == DF.Invalid:
            yield _q(q.name, "df"), "df must be a data format"


@rule
def graph_input_count(ctx: Ctx):
    """input_count is >= 1 (§1.3)."""
    for g in ctx.netlist.graphs.values():
        if isinstance(g.input_count, bool) or not isinstance(g.input_count, int) or g.input_count < 1:
            yield f"graphs.{g.name}.input_count", f"input_count must be >= 1, got {g.input_count!r}"


@rule
def op_type_known(ctx: Ctx):
    """Op types are ones the backend has kernels for (§3.1)."""
    for g, op in ctx.ops():
        if op.type not in OP_TYPES:
            yield _o(g, op, "type"), f"unknown op type {op.type!r}"


@rule
def op_fields(ctx: Ctx):
    """Grid, blocking, buffer and format fields are in range; grid_loc is set (§1.3)."""
    for g, op in ctx.ops():
        if not _positive_pair(op.grid_size):
            yield _o(g, op, "grid_size"), f"grid_size values must be > 0, got {list(op.grid_size)}"
        if not isinstance(op.t, int) or op.t < 1:
            yield _o(g, op, "t"), f"t must be >= 1, got {op.t!r}"
        for key in ("mblock", "ublock"):
            if not _positive_pair(getattr(op, key)):
                yield _o(g, op, key), f"{key} values must be > 0, got {list(getattr(op, key))}"
        if not isinstance(op.buf_size_mb, int) or op.buf_size_mb < 0:
            yield _o(g, op, "buf_size_mb"), f"buf_size_mb must be >= 0, got {op.buf_size_mb!r}"
        if op.ublock_order not in ("r", "c"):
            yield _o(g, op, "ublock_order"), f"ublock_order must be r or c, got {op.ublock_order!r}"
        if op.grid_loc is None:
            if op.type != "ethernet_datacopy":
                yield _o(g, op, "grid_loc"), "grid_loc is required"
        elif not all(isinstance(v, int) and v >= 0 for v in op.grid_loc):
            yield _o(g, op, "grid_loc"), f"grid_loc values must be >= 0, got {list(op.grid_loc)}"
        if op.overlay_size is not None and op.overlay_size < 0:
            yield _o(g, op, "overlay_size"), f"overlay_size must be >= 0, got {op.overlay_size}"
        for key in ("out_df", "intermed_df", "acc_df"):
            if getattr(op, key) == DF.Invalid:
                yield _o(g, op, key), f"{key} must be a data format"
        if op.math_fidelity == MathFidelity.Invalid:
            yield _o(g, op, "math_fidelity"), "math_fidelity must be LoFi, HiFi2, HiFi2_B, HiFi3 or HiFi4"


def _expected_input_count(op: NetlistOp) -> Optional[Tuple[int, int]]:
    bias = 1 if op.attr("bias") else 0
    if op.type in MATMUL_OPS:
        n = (3 if op.attr("identity") else 2) + bias + (1 if op.attr("requant") or op.attr("dequant") else 0)
        return (n, n)
    if op.type == "depthwise":
        return (2 + bias, 2 + bias)
    if op.type in BINARY_OPS or op.type == "embedding":
        return (2, 2)
    if op.type in COPY_OPS or op.type in SFPU_OPS or op.type in ("reduce", "tilizer"):
        return (1, 1)
    if op.type == "splice":
        return (1, 8)
    return None


@rule
def op_input_count(ctx: Ctx):
    """Inputs per op type (§3.1); one in_df per input; per-input lists have one value per input."""
    for g, op in ctx.ops():
        n = len(op.inputs)
        if n == 0:
            yield _o(g, op, "inputs"), "an op needs at least one input"
        expected = _expected_input_count(op)
        if expected and not expected[0] <= n <= expected[1]:
            want = expected[0] if expected[0] == expected[1] else f"{expected[0]}..{expected[1]}"
            yield _o(g, op, "inputs"), f"a {op.type} op with these attributes takes {want} input(s), got {n}"
        if len(op.in_df) != n:
            yield _o(g, op, "in_df"), f"in_df has {len(op.in_df)} format(s) for {n} input(s)"
        for key in ("input_buf_min_size_tiles", "input_dram_io_buf_size_tiles"):
            values = getattr(op, key)
            if values is None:
                continue
            if len(values) != n:
                yield _o(g, op, key), f"{key} has {len(values)} value(s) for {n} input(s)"
            elif any(not isinstance(v, int) or v < 0 for v in values):
                yield _o(g, op, key), f"{key} values must be >= 0, got {list(values)}"
        if len(op.forked_dram_inputs) > n:
            yield _o(g, op, "forked_dram_inputs"), "more forked DRAM inputs than inputs"


@rule
def op_input_keys(ctx: Ctx):
    """input_N_tms / input_N_pad / input_N_unpad name an existing input; an input is padded at most once."""
    for g, op in ctx.ops():
        n = len(op.inputs)
        for kind, table in (("tms", op.input_tms), ("pad", op.input_pad), ("unpad", op.input_unpad)):
            for index in table:
                if not 0 <= index < n:
                    yield _o(g, op, f"input_{index}_{kind}"), f"op has {n} input(s); there is no input {index}"
        for index, tms in op.input_tms.items():
            pads = sum(isinstance(tm, Pad) for tm in tms)
            if pads > 1 or (pads and index in op.input_pad):
                yield _tms_path(g, op, index), "padding must be specified only once per input"


@rule
def op_inputs_exist(ctx: Ctx):
    """Every input is a queue or an op of the same graph (§1.3)."""
    for g, op in ctx.ops():
        for i, name in enumerate(op.inputs):
            if name in ctx.netlist.queues or (name in g.ops and name != op.name):
                continue
            path = f"{_o(g, op, 'inputs')}[{i}]"
            if name == op.name:
                yield path, "an op cannot read its own output"
            elif ctx.graphs_of_op(name):
                yield path, (f"input {name!r} is an op of graph {ctx.graphs_of_op(name)[0]}; "
                             "cross-graph data must go through a queue")
            else:
                yield path, f"input {name!r} is neither a queue nor an op of graph {g.name}"
