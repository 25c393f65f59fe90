"""What the performance model walks: the executes one microbatch runs (program flattening and grouping
into temporal epochs), and views that make netlist ops look like what :mod:`pybuda.perf.cost` reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from pybuda.errors import ConfigError, NetlistError
from pybuda.netlist.model import EndLoop, Execute, GraphDef, Loop, Netlist, NetlistOp, Program, StaticVar, Var
from pybuda.netlist.operands import _input_tiles as _input_buffer_tiles_raw
from pybuda.dtypes import MathFidelity


# --------------------------------------------------------------------------------------------------
# Views that make netlist ops look like what cost.py reads (BudaOp / OpModel fields)
# --------------------------------------------------------------------------------------------------

class _CostOp:
    """A NetlistOp seen through the fields :mod:`pybuda.perf.cost` reads from a lowered op."""

    __slots__ = ("name", "type", "attrs", "inputs", "in_df", "out_df", "intermed_df", "acc_df",
                 "math_fidelity", "tags")

    def __init__(self, op: NetlistOp):
        self.name = op.name
        self.type = op.type
        self.attrs = op.attributes
        self.inputs = list(op.inputs)
        self.in_df = list(op.in_df)
        self.out_df = op.out_df
        self.intermed_df = op.intermed_df
        self.acc_df = op.acc_df
        self.math_fidelity = op.math_fidelity
        self.tags: Dict[str, Any] = {}


class _CostModel:
    """A NetlistOp's blocking seen as an OpModel."""

    __slots__ = ("grid_shape", "t", "mblock", "ublock", "m_k", "u_kt")

    def __init__(self, op: NetlistOp):
        self.grid_shape = op.grid_size
        self.t = op.t
        self.mblock = op.mblock
        self.ublock = op.ublock
        self.m_k = op.m_k
        self.u_kt = op.u_kt


class _UnitMatmul:
    """One LoFi tile product: what :func:`cost.matmul_ideal_cycles` charges per tile product per phase."""

    type = "matmul"
    math_fidelity = MathFidelity.LoFi
    attrs: Dict[str, Any] = {}


_UNIT_MATMUL = _UnitMatmul()


class _UnitModel:
    """A one-core, one-tile blocking (the fields cost.py reads)."""

    grid_shape = (1, 1)
    t = 1
    mblock = (1, 1)
    ublock = (1, 1)
    m_k = 1
    u_kt = 1


_UNIT_MODEL = _UnitModel()


def _input_buffer_tiles(op: NetlistOp, index: int) -> int:
    """Tiles of op's streaming input buffer ``index`` on one core (NBS §5.3, at least
    ``input_buf_min_size_tiles``)."""
    tiles = _input_buffer_tiles_raw(op, index, False)
    if op.input_buf_min_size_tiles and index < len(op.input_buf_min_size_tiles):
        tiles = max(tiles, int(op.input_buf_min_size_tiles[index]))
    return tiles


def _fused_table(netlist: Netlist) -> Dict[Any, Dict[str, Any]]:
    """The netlist's fused ops in the dict form cost.py costs a ``fused_op`` from."""
    table: Dict[Any, Dict[str, Any]] = {}
    for fid, fdef in netlist.fused_ops.items():
        schedules = []
        for sched in fdef.schedules:
            entries = []
            for sub in sched:
                entries.append({sub.name: {"type": sub.type, "inputs": list(sub.inputs), "output": sub.output,
                                           "mblock": list(sub.mblock), "ublock": list(sub.ublock),
                                           "attributes": dict(sub.attributes)}})
            schedules.append(entries)
        table[fid] = {"inputs": fdef.inputs, "intermediates": fdef.intermediates, "schedules": schedules}
    return table


# --------------------------------------------------------------------------------------------------
# Program walk: which graphs run, in what order, per microbatch
# --------------------------------------------------------------------------------------------------

@dataclass
class _Exec:
    graph: GraphDef
    execute: Execute


_MAX_UNROLL = 4096  # guard against absurd constant loop counts


def _pick_program(netlist: Netlist, program: Optional[str]) -> Program:
    if program is not None:
        try:
            return netlist.program(program)
        except KeyError:
            raise ConfigError(f"netlist has no program '{program}'; programs are "
                              f"{[p.name for p in netlist.programs]}") from None
    for prog in netlist.programs:
        if any(isinstance(i, Execute) for i in prog.instructions):
            return prog
    raise NetlistError("programs", "no program executes a graph; nothing to model")


def _flatten(netlist: Netlist, prog: Program) -> List[_Exec]:
    """The executes of one call of ``prog`` with every ``$p_`` (parameter) loop run once — one
    microbatch — and constant-count loops unrolled."""
    env: Dict[str, int] = {}
    for instr in prog.instructions:
        if isinstance(instr, (Var, StaticVar)):
            env.update({k: int(v) for k, v in instr.values.items()})

    def count_of(operand: Any) -> int:
        if isinstance(operand, bool):
            return int(operand)
        if isinstance(operand, int):
            return operand
        if isinstance(operand, str) and operand in env:
            return env[operand]
        return 1  # a $p_ parameter: the microbatch loop, one iteration per microbatch

    def walk(instrs: Sequence[Any], start: int) -> Tuple[List[_Exec], int]:
        out: List[_Exec] = []
        i = start
        while i < len(instrs):
            ins = instrs[i]
            if isinstance(ins, EndLoop):
                return out, i
            if isinstance(ins, Loop):
                body, end = walk(instrs, i + 1)
                out.extend(body * max(1, min(count_of(ins.count), _MAX_UNROLL)))
                i = end + 1
                continue
            if isinstance(ins, Execute):
                graph = netlist.graphs.get(ins.graph_name)
                if graph is None:
                    raise NetlistError(f"programs.{prog.name}.execute", f"unknown graph '{ins.graph_name}'")
                out.append(_Exec(graph, ins))
            i += 1
        return out, i

    execs, _ = walk(prog.instructions, 0)
    return execs


def _chip_of(target: Union[int, Tuple[int, ...]]) -> int:
    return target if isinstance(target, int) else (target[0] if target else 0)


def _group_temporal(execs: List[_Exec], temporal_epochs: Optional[Mapping[str, int]]) -> List[List[_Exec]]:
    """Group consecutive executes into temporal epochs: graphs on different chips that follow each
    other run concurrently (one temporal epoch); a graph on a chip already in the group starts the next.
    An explicit ``temporal_epochs`` map (graph name → index) overrides the grouping."""
    groups: List[List[_Exec]] = []
    keys: List[Optional[int]] = []
    for ex in execs:
        chip = _chip_of(ex.graph.target_device)
        key = temporal_epochs.get(ex.graph.name) if temporal_epochs else None
        joins = bool(groups) and chip not in {_chip_of(e.graph.target_device) for e in groups[-1]}
        if temporal_epochs:
            joins = joins and key is not None and key == keys[-1]
        if joins:
            groups[-1].append(ex)
        else:
            groups.append([ex])
            keys.append(key)
    return groups
