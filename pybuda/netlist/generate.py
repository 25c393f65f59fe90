"""Netlist generation: lowered graph + balancer + placer solutions -> :class:`pybuda.netlist.Netlist`.

- **Queues** come from the placer's ``queue_placements`` (grid, t, mblock, ublock, df, entries, host/DRAM
  addresses): graph inputs ``type: queue`` fed by ``HOST``; parameters and constants ``type: ram`` fed by
  ``HOST`` (one entry); outputs ``type: queue`` fed by their producing op; epoch-to-epoch queues
  ``type: queue`` fed by the producer, with ``entries`` = microbatch.
- **Graphs**: one per placer epoch, named ``<epoch_type>_<n>`` (``fwd_0``, ``fwd_1`` ...), with the epoch's
  chip as ``target_device`` and ``input_count`` = microbatch. Each op gets its placement (``grid_loc``,
  ``grid_size``, ``grid_transpose``), its op model (``t``, ``mblock``, ``ublock``, ``ublock_order``,
  ``buf_size_mb``, ``m_k``/``u_kt`` for matmul and reduce), its formats, and on every input the edge TMs
  wrapped by the t-streaming TMs of producer and consumer (:func:`pybuda.balancer.stream_edge_tms`);
  an input produced in an earlier epoch reads the placer's e2e queue instead.
- **Fused ops**: one ``fused_ops`` entry per distinct (schedule, parent blocking); scheduled ops take the
  parent op's mblock/ublock.
- **Program** ``run_fwd_0``: ``param [$p_loop_count]``, constants ``$c_microbatch_size``/``$c_zero``/``$c_one``,
  one pair of static pointer variables per streamed queue (inputs and e2e queues), then a loop of
  ``$p_loop_count`` iterations that executes every graph in epoch order and advances each pointer by the
  microbatch with ``incwrap`` at ``2 * entries`` (the pointer range of a queue with ``entries`` slots).
  Streamed queues are read with ``rd_ptr_local``/``rd_ptr_global``; parameters/constants with
  ``prologue`` (when every reader in the epoch keeps them in L1) and ``rd/wr_ptr_global: $c_zero``.
  Each epoch-to-epoch queue is bracketed by ``allocate_queue`` before its producer's epoch and
  ``deallocate_queue`` after its last consumer's: the placer lets queues with disjoint lifetimes share DRAM.

Validation failures of the generated netlist are compiler bugs and are reported as CompileError.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Tuple

from pybuda.balancer.edges import edge_unpad, stream_edge_tms
from pybuda.netlist.model import (AllocateQueue, DeallocateQueue, EndLoop, Execute, FusedOpDef, FusedSubOp,
                                  GraphDef, Loop, Netlist, NetlistOp, Param, Program, QueueDef, QueueSetting, StaticVar,
                                  Var, VarInst)
from pybuda.ir.lowered import BudaGraph
from pybuda.netlist.tms import TM, InputUnpad, as_tms
from pybuda.perf import sparse

if TYPE_CHECKING:  # the compile context is only read, never built, here
    from pybuda.passes.context import CompileContext

PROGRAM_NAME = "run_fwd_0"


def program_name(epoch_type: str) -> str:
    """The program that runs a compile's epochs: ``run_fwd_0``, ``run_bwd_0`` or ``run_opt_0``."""
    return f"run_{epoch_type}_0"
_READ_ONLY_KINDS = ("parameter", "constant")
_BLOCKED_ATTR_TYPES = ("matmul", "reduce")


def generate_netlist(bg: BudaGraph, balancer_solution: Any, placer_solution: Any, ctx: CompileContext) -> Netlist:
    """Build the netlist of a placed, balanced graph (see the module docstring)."""
    netlist = Netlist(devices_arch=ctx.arch_name)
    queue_kinds = _queues(bg, placer_solution, netlist)
    fused_ids: Dict[Tuple, int] = {}
    mb = max(1, int(ctx.microbatch))
    for epoch in placer_solution.epochs:
        gname = f"{epoch.epoch_type}_{epoch.global_epoch}"
        graph = GraphDef(name=gname, target_device=int(epoch.chip_id), input_count=mb)
        for name in epoch.ops:
            graph.ops[name] = _op(bg, name, balancer_solution, placer_solution, netlist, fused_ids)
        netlist.graphs[gname] = graph
    netlist.programs.append(_program(netlist, bg, balancer_solution, placer_solution, queue_kinds, mb,
                                     program_name(ctx.epoch_type)))
    return netlist


# --- queues ----------------------------------------------------------------------------------------------


def _queues(bg: BudaGraph, ps: Any, netlist: Netlist) -> Dict[str, str]:
    kinds: Dict[str, str] = {}
    for name, qp in ps.queue_placements.items():
        if name in bg.queues:
            q = bg.queues[name]
            kind = q.kind
            source = q.producer if q.producer is not None else "HOST"
        elif name in ps.e2e_queues:
            kind = "epoch_to_epoch"
            source = ps.e2e_queues[name].producer
        else:
            continue
        kinds[name] = kind
        qtype = "ram" if kind in _READ_ONLY_KINDS else "queue"
        netlist.queues[name] = QueueDef(
            name=name, input=source, type=qtype, entries=int(qp.entries), grid_size=tuple(qp.grid_size), t=int(qp.t),
            mblock=tuple(qp.mblock), ublock=tuple(qp.ublock), ublock_order=qp.ublock_order, df=qp.df,
            target_device=int(qp.chip_id), loc=qp.loc,
            dram=tuple(tuple(a) for a in qp.dram) if qp.loc == "dram" else None,
            host=tuple(tuple(a) for a in qp.host) if qp.loc == "host" else None)
    return kinds


# --- ops ---------------------------------------------------------------------------------------------------


def _op(bg: BudaGraph, name: str, bs: Any, ps: Any, netlist: Netlist, fused_ids: Dict[Tuple, int]) -> NetlistOp:
    op = bg.ops[name]
    model = bs.op_models[name]
    place = ps.op_placements[name]
    inputs: List[str] = []
    input_tms: Dict[int, Tuple[TM, ...]] = {}
    input_unpad: Dict[int, InputUnpad] = {}
    for i, src in enumerate(op.inputs):
        actual = ps.input_source(name, src) if src in bg.ops else src
        inputs.append(actual)
        producer_model = bs.op_models.get(src) if src in bg.ops else None
        tms = stream_edge_tms(producer_model, model, op.type, i, list(op.input_tms.get(i, [])))
        tms = as_tms(tms)
        if tms:
            input_tms[i] = tms
        unpad = edge_unpad(producer_model)  # a padded producer (OpModel.padding): drop its padding first
        if unpad is not None:
            input_unpad[i] = unpad
    attrs = dict(op.attrs)
    if op.type in _BLOCKED_ATTR_TYPES and not (op.type == "reduce" and attrs.get("dim") == "z"):
        attrs["m_k"] = int(model.m_k)
        attrs["u_kt"] = int(model.u_kt)
    if attrs.get("identity"):  # a sparse matmul: its non-zero strips per core, for this layout
        strips = sparse.strips_for_layout(op.tags, int(model.grid_shape[0]), int(model.grid_shape[1]),
                                          int(model.mblock[0]) * int(model.ublock[0]), int(model.u_kt))
        if strips:
            attrs["num_nz_strips"] = list(strips)
    if op.type == "fused_op":
        attrs["fused_op_id"] = _fused_id(bg, op.attrs["fused_op_id"], model, netlist, fused_ids)
    return NetlistOp(
        name=name, type=op.type, grid_size=tuple(model.grid_shape), inputs=tuple(inputs), in_df=tuple(op.in_df),
        out_df=op.out_df, intermed_df=op.intermed_df, acc_df=op.acc_df, math_fidelity=op.math_fidelity,
        t=int(model.t), mblock=tuple(model.mblock), ublock=tuple(model.ublock), buf_size_mb=int(model.buf_size_mb),
        grid_loc=tuple(place.grid_loc), grid_transpose=bool(place.transposed), ublock_order=model.ublock_order,
        untilize_output=bool(op.untilize_output), gradient_op=bool(op.gradient_op), input_tms=input_tms,
        input_unpad=input_unpad, attributes=attrs,
        input_buf_min_size_tiles=tuple(model.input_buf_min_size_tiles) if getattr(model, "input_buf_min_size_tiles",
                                                                                   ()) else None)


def _fused_id(bg: BudaGraph, fid: int, model: Any, netlist: Netlist, fused_ids: Dict[Tuple, int]) -> int:
    key = (fid, tuple(model.mblock), tuple(model.ublock))
    if key in fused_ids:
        return fused_ids[key]
    new_id = len(fused_ids)
    netlist.fused_ops[new_id] = fused_op_def(bg.fused_ops[fid], new_id, tuple(model.mblock), tuple(model.ublock))
    fused_ids[key] = new_id
    return new_id


def fused_op_def(spec: Dict[str, Any], fused_id: int, mblock: Tuple[int, int] = (1, 1),
                 ublock: Tuple[int, int] = (1, 1)) -> FusedOpDef:
    """The netlist ``fused_ops`` entry of a lowered graph's fused-op spec; scheduled ops take the parent
    op's ``mblock``/``ublock`` (blocking does not change what a fused op computes, so a lowered graph
    evaluated before balancing uses the defaults)."""
    schedules = []
    for schedule in spec["schedules"]:
        subs = []
        for entry in schedule:
            for sub_name, sub in entry.items():
                subs.append(FusedSubOp(
                    name=sub_name, type=sub["type"], inputs=tuple(sub["inputs"]), output=sub["output"],
                    mblock=mblock, ublock=ublock,
                    input_tms={int(k): as_tms(v) for k, v in sub.get("input_tms", {}).items()},
                    pop=tuple(sub.get("pop", ())), pop_last=tuple(sub.get("pop_last", ())),
                    attributes=dict(sub.get("attributes", {}))))
        schedules.append(subs)
    return FusedOpDef(id=fused_id, inputs=int(spec["inputs"]), intermediates=int(spec["intermediates"]),
                      schedules=schedules)


# --- program -----------------------------------------------------------------------------------------------


def _program(netlist: Netlist, bg: BudaGraph, bs: Any, ps: Any, kinds: Dict[str, str], mb: int,
             program_name: str = PROGRAM_NAME) -> Program:
    streamed: List[str] = []
    pointer_vars: Dict[str, Tuple[str, str]] = {}
    executes: List[Execute] = []
    for epoch in ps.epochs:
        gname = f"{epoch.epoch_type}_{epoch.global_epoch}"
        graph = netlist.graphs[gname]
        settings: Dict[str, QueueSetting] = {}
        prologue: Dict[str, bool] = {}
        for op in graph.ops.values():
            model = bs.op_models[op.name]
            for i, src in enumerate(op.inputs):
                kind = kinds.get(src)
                if kind is None:
                    continue
                if kind in _READ_ONLY_KINDS:
                    keep = i in tuple(model.prologue_inputs) and i not in tuple(getattr(model, "dram_inputs", ()))
                    prologue[src] = prologue.get(src, True) and keep
                elif kind in ("input", "epoch_to_epoch") and src not in settings:
                    if src not in pointer_vars:
                        k = len(pointer_vars)
                        pointer_vars[src] = (f"$lptr_q{k}", f"$gptr_q{k}")
                        streamed.append(src)
                    lptr, gptr = pointer_vars[src]
                    settings[src] = QueueSetting(prologue=False, epilogue=False, zero=False, rd_ptr_local=lptr,
                                                 rd_ptr_global=gptr)
        for src, keep in prologue.items():
            settings[src] = QueueSetting(prologue=keep, epilogue=False, zero=False, rd_ptr_global="$c_zero",
                                         wr_ptr_global="$c_zero")
        executes.append(Execute(graph_name=gname, queue_settings=settings))
    instrs: List[Any] = [Param(names=("$p_loop_count",)),
                         Var(values={"$c_microbatch_size": mb, "$c_one": 1, "$c_zero": 0})]
    static: Dict[str, int] = {}
    for src in streamed:
        lptr, gptr = pointer_vars[src]
        static[lptr] = 0
        static[gptr] = 0
    if static:
        instrs.append(StaticVar(values=static))
    instrs.append(Loop(count="$p_loop_count"))
    # Epoch-to-epoch queues live from their producer's epoch to their last consumer's; the placer may give
    # queues with disjoint lifetimes the same DRAM, so the program declares each lifetime explicitly.
    starts: Dict[int, List[str]] = {}
    ends: Dict[int, List[str]] = {}
    for name, e2e in ps.e2e_queues.items():
        starts.setdefault(e2e.producer_epoch, []).append(name)
        ends.setdefault(max(e2e.consumer_epochs), []).append(name)
    for epoch, execute in zip(ps.epochs, executes):
        if starts.get(epoch.global_epoch):
            instrs.append(AllocateQueue(names=tuple(starts[epoch.global_epoch])))
        instrs.append(execute)
        if ends.get(epoch.global_epoch):
            instrs.append(DeallocateQueue(names=tuple(ends[epoch.global_epoch])))
    for src in streamed:
        lptr, gptr = pointer_vars[src]
        wrap = 2 * netlist.queues[src].entries
        instrs.append(VarInst(out=lptr, op="incwrap", args=("$c_microbatch_size", wrap)))
        instrs.append(VarInst(out=gptr, op="incwrap", args=("$c_microbatch_size", wrap)))
    instrs.append(EndLoop())
    return Program(name=program_name, instructions=instrs)


def queue_lifetimes(netlist: Netlist, program: str = PROGRAM_NAME) -> Dict[str, Tuple[int, int]]:
    """(first, last) instruction index of every queue between its allocate_queue and deallocate_queue."""
    out: Dict[str, Tuple[int, int]] = {}
    open_: Dict[str, int] = {}
    for i, instr in enumerate(netlist.program(program).instructions):
        if isinstance(instr, AllocateQueue):
            for n in instr.names:
                open_[n] = i
        elif isinstance(instr, DeallocateQueue):
            for n in instr.names:
                out[n] = (open_.pop(n, 0), i)
    return out
