"""Hand-built netlists for the performance-model tests: small builders, so each test states only what
it is about (the op's blocking, where its queues live, how the program runs the graphs)."""

from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from pybuda.netlist import (
    EndLoop, Execute, GraphDef, Loop, Netlist, NetlistOp, Param, Program, QueueDef, QueueSetting, StaticVar, Var,
)
from pybuda.dtypes import DataFormat as DF, MathFidelity as MF


def queue(name: str, *, input: str = "HOST", grid=(1, 1), t=1, mblock=(1, 1), ublock=(1, 1), df=DF.Float16_b,
          entries=2, loc="dram", channels: Sequence[int] = (0,), qtype: Optional[str] = None, chip: int = 0) -> QueueDef:
    """A queue whose buffers sit round-robin on ``channels`` (DRAM) or in host memory."""
    n = grid[0] * grid[1]
    allocs = tuple((channels[i % len(channels)], 0x1000_0000 + i * 0x100_0000) for i in range(n))
    return QueueDef(name=name, input=input, type=qtype or ("ram" if entries == 1 and input == "HOST" else "queue"),
                    entries=entries, grid_size=grid, t=t, mblock=mblock, ublock=ublock, df=df, target_device=chip,
                    loc=loc, dram=allocs if loc == "dram" else None,
                    host=tuple((0, 0x1000 * i) for i in range(n)) if loc == "host" else None)


def op(name: str, type_: str, inputs: Sequence[str], *, grid=(1, 1), loc=(0, 0), t=1, mblock=(1, 1), ublock=(1, 1),
       in_df: Optional[Sequence[DF]] = None, out_df=DF.Float16_b, fidelity=MF.HiFi2, attrs: Optional[Dict] = None,
       acc_df=DF.Float16_b, transpose=False) -> NetlistOp:
    """A placed op; ``in_df`` defaults to ``out_df`` for every input."""
    return NetlistOp(name=name, type=type_, grid_size=grid, grid_loc=loc, grid_transpose=transpose, inputs=tuple(inputs),
                     in_df=tuple(in_df or [out_df] * len(inputs)), out_df=out_df, intermed_df=out_df, acc_df=acc_df,
                     math_fidelity=fidelity, t=t, mblock=mblock, ublock=ublock, buf_size_mb=2,
                     attributes=dict(attrs or {}))


def graph(name: str, ops: Iterable[NetlistOp], *, input_count=4, chip=0) -> GraphDef:
    return GraphDef(name=name, target_device=chip, input_count=input_count, ops={o.name: o for o in ops})


def program(executes: Sequence[Tuple[str, Dict[str, QueueSetting]]], name: str = "run") -> Program:
    """``param [$p_loop_count]``, then a loop over the executes (one iteration = one microbatch)."""
    instrs: List = [Param(names=("$p_loop_count",)), Var(values={"$c_zero": 0}),
                    StaticVar(values={"$ptr": 0}), Loop(count="$p_loop_count")]
    for gname, settings in executes:
        instrs.append(Execute(graph_name=gname, queue_settings=settings))
    instrs.append(EndLoop())
    return Program(name=name, instructions=instrs)


def stream(prologue: bool = False) -> QueueSetting:
    """Settings of a streamed queue (``prologue: false``) or of a parameter loaded into L1 (``true``)."""
    if prologue:
        return QueueSetting(prologue=True, epilogue=False, zero=False, rd_ptr_global="$c_zero",
                            wr_ptr_global="$c_zero")
    return QueueSetting(prologue=False, epilogue=False, zero=False, rd_ptr_local="$ptr", rd_ptr_global="$ptr")


def netlist(queues: Iterable[QueueDef], graphs: Iterable[GraphDef], prog: Program, arch="wormhole_b0") -> Netlist:
    return Netlist(devices_arch=arch, queues={q.name: q for q in queues}, graphs={g.name: g for g in graphs},
                   programs=[prog])
