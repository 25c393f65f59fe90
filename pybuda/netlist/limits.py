"""Device-independent upper bounds on every size a netlist can state.

A netlist comes from users and device images, so its numbers are untrusted. Everything that later
enumerates cores or tiles, or allocates per entry (validation rules, the golden device), relies on these
bounds holding first: :func:`size_problems` is run by the parser (:func:`pybuda.netlist.parse.parse_yaml`)
and as the first, gating validation rule (``netlist_sizes``), so a netlist built in Python is held to
the same bounds. The maxima are far above any real card (a Blackhole chip is 10x14 cores, DRAM holds
a few 10^7 tiles) yet small enough that arithmetic on them never reaches gigabytes.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional, Tuple

from pybuda.netlist.model import (
    AllocateQueue, DeallocateQueue, Execute, Loop, Netlist, StaticVar, Var, VarInst,
)
from pybuda.netlist.tms import Broadcast, Pad, TM

#: Rows or columns of an op's grid, grid_loc and queue grids (real chips: at most 14).
MAX_GRID_DIM = 64
#: Z dimension ``t`` of an op or queue.
MAX_T = 65536
#: Each dimension of ``mblock`` (in ublocks).
MAX_MBLOCK_DIM = 65536
#: Each dimension of ``ublock`` (in tiles; the dest register holds 16).
MAX_UBLOCK_DIM = 64
#: Each dimension of ``tile_dim`` (in datums).
MAX_TILE_DIM = 32
#: Tiles of one entry of a queue or one output of an op: grid x t x mblock x ublock.
MAX_TILES_PER_ENTRY = 1 << 26
#: ``entries`` of a queue and ``input_count`` of a graph.
MAX_ENTRIES = 1 << 20
#: Tiles a queue holds in all: entries x tiles per entry.
MAX_QUEUE_TILES = 1 << 28
#: Literal loop counts, variable initial values and varinst operands (the backend keeps them in int32).
MAX_PROGRAM_INT = (1 << 31) - 1
#: Broadcast / slice / stack factors and pad sizes of TMs (tiles or z).
MAX_TM_FACTOR = 1 << 16
#: Chip ids (target_device).
MAX_DEVICE_ID = 1 << 16
#: DRAM channel numbers and addresses.
MAX_CHANNEL = 1 << 10
MAX_ADDRESS = 1 << 48
#: Buffer and port sizes: buf_size_mb, input_buf_min_size_tiles, overlay_size, read/write ports.
MAX_BUFFER = 1 << 30
#: Inputs / intermediates of a fused op.
MAX_FUSED_OPERANDS = 1 << 10

Problem = Tuple[str, str]


def _check(value: Any, path: str, high: int, low: Optional[int] = None) -> Iterator[Problem]:
    # Only ints are judged here; wrong types are the parser's and other rules' business.
    if isinstance(value, int) and not isinstance(value, bool):
        if value > high:
            yield path, f"{value} is beyond the largest allowed value {high}"
        elif low is not None and value < low:
            yield path, f"{value} is below the smallest allowed value {low}"


def _pair(value: Any, path: str, high: int) -> Iterator[Problem]:
    if isinstance(value, tuple):
        for i, v in enumerate(value):
            yield from _check(v, f"{path}[{i}]", high)


def _product(*values: Any) -> Optional[int]:
    out = 1
    for v in values:
        if not isinstance(v, int) or isinstance(v, bool):
            return None
        out *= max(v, 0)
    return out


def _block_tiles(obj: Any) -> Optional[int]:
    grid, mblock, ublock = obj.grid_size, obj.mblock, obj.ublock
    if not all(isinstance(p, tuple) and len(p) == 2 for p in (grid, mblock, ublock)):
        return None
    return _product(grid[0], grid[1], obj.t, mblock[0], mblock[1], ublock[0], ublock[1])


def _shape(obj: Any, path: str) -> Iterator[Problem]:
    """grid_size, t, mblock, ublock, tile_dim of a queue or op, each and as a product."""
    bad = False
    for key, high in (("grid_size", MAX_GRID_DIM), ("mblock", MAX_MBLOCK_DIM), ("ublock", MAX_UBLOCK_DIM),
                      ("tile_dim", MAX_TILE_DIM)):
        for problem in _pair(getattr(obj, key), f"{path}.{key}", high):
            bad = True
            yield problem
    for problem in _check(obj.t, f"{path}.t", MAX_T):
        bad = True
        yield problem
    tiles = None if bad else _block_tiles(obj)
    if tiles is not None and tiles > MAX_TILES_PER_ENTRY:
        yield path, (f"grid_size x t x mblock x ublock is {tiles} tiles, beyond the largest allowed "
                     f"{MAX_TILES_PER_ENTRY}")


def _tms(tms: Any, path: str) -> Iterator[Problem]:
    for i, tm in enumerate(tms or ()):
        if not isinstance(tm, TM):
            continue
        if isinstance(tm, Pad):
            yield from _check(tm.rt, f"{path}[{i}]", MAX_TM_FACTOR)
            yield from _check(tm.ct, f"{path}[{i}]", MAX_TM_FACTOR)
        elif isinstance(tm, Broadcast) or hasattr(tm, "factor"):
            yield from _check(getattr(tm, "factor", None), f"{path}[{i}]", MAX_TM_FACTOR)


def _devices(value: Any, path: str) -> Iterator[Problem]:
    for v in (value if isinstance(value, tuple) else (value,)):
        yield from _check(v, path, MAX_DEVICE_ID)


def size_problems(netlist: Netlist) -> Iterator[Problem]:
    """Yield ``(key path, message)`` for every size in ``netlist`` beyond the maxima of this module.

    Cheap by construction: it looks at each stated number once and multiplies, never enumerates cores,
    tiles or entries."""
    for name, q in netlist.queues.items():
        path = f"queues.{name}"
        bad = False
        for problem in _check(q.entries, f"{path}.entries", MAX_ENTRIES):
            bad = True
            yield problem
        shape = list(_shape(q, path))
        yield from shape
        tiles = None if bad or shape else _block_tiles(q)
        total = _product(tiles, q.entries) if tiles is not None else None
        if total is not None and total > MAX_QUEUE_TILES:
            yield f"{path}.entries", (f"entries x tiles per entry is {total} tiles, beyond the largest allowed "
                                      f"{MAX_QUEUE_TILES}")
        yield from _devices(q.target_device, f"{path}.target_device")
        for key in ("dram", "host"):
            for i, alloc in enumerate(getattr(q, key) or ()):
                if isinstance(alloc, tuple) and len(alloc) == 2:
                    yield from _check(alloc[0], f"{path}.{key}[{i}][0]", MAX_CHANNEL)
                    yield from _check(alloc[1], f"{path}.{key}[{i}][1]", MAX_ADDRESS)
        for key in ("read_ports", "write_ports"):
            for i, v in enumerate(getattr(q, key) or ()):
                yield from _check(v, f"{path}.{key}[{i}]", MAX_BUFFER)
        yield from _tms(q.input_tms, f"{path}.input_tms")
    for gname, graph in netlist.graphs.items():
        gpath = f"graphs.{gname}"
        yield from _check(graph.input_count, f"{gpath}.input_count", MAX_ENTRIES)
        yield from _devices(graph.target_device, f"{gpath}.target_device")
        for oname, op in graph.ops.items():
            path = f"{gpath}.{oname}"
            yield from _shape(op, path)
            yield from _pair(op.grid_loc, f"{path}.grid_loc", MAX_GRID_DIM)
            yield from _check(op.buf_size_mb, f"{path}.buf_size_mb", MAX_BUFFER)
            yield from _check(op.overlay_size, f"{path}.overlay_size", MAX_BUFFER)
            for key in ("input_buf_min_size_tiles", "input_dram_io_buf_size_tiles"):
                for i, v in enumerate(getattr(op, key) or ()):
                    yield from _check(v, f"{path}.{key}[{i}]", MAX_BUFFER)
            for index, tms in (op.input_tms or {}).items():
                yield from _tms(tms, f"{path}.input_{index}_tms")
            for index, pad in (op.input_pad or {}).items():
                yield from _check(pad.rt, f"{path}.input_{index}_pad.rt", MAX_TM_FACTOR)
                yield from _check(pad.ct, f"{path}.input_{index}_pad.ct", MAX_TM_FACTOR)
            for index, unpad in (op.input_unpad or {}).items():
                yield from _check(unpad.rt, f"{path}.input_{index}_unpad.rt", MAX_TM_FACTOR)
                yield from _check(unpad.ct, f"{path}.input_{index}_unpad.ct", MAX_TM_FACTOR)
    for p, program in enumerate(netlist.programs):
        ppath = f"programs[{p}].{program.name}"
        for i, instr in enumerate(program.instructions):
            ipath = f"{ppath}[{i}]"
            if isinstance(instr, Loop):
                yield from _check(instr.count, f"{ipath}.loop", MAX_PROGRAM_INT)
            elif isinstance(instr, (Var, StaticVar)):
                key = "var" if isinstance(instr, Var) else "staticvar"
                for name, value in instr.values.items():
                    yield from _check(value, f"{ipath}.{key}.{name}", MAX_PROGRAM_INT, -MAX_PROGRAM_INT)
            elif isinstance(instr, VarInst):
                for j, arg in enumerate(instr.args):
                    yield from _check(arg, f"{ipath}.varinst[{j + 2}]", MAX_PROGRAM_INT, -MAX_PROGRAM_INT)
            elif isinstance(instr, Execute):
                for qname, setting in instr.queue_settings.items():
                    for key, value in vars(setting).items():
                        yield from _check(value, f"{ipath}.execute.queue_settings.{qname}.{key}",
                                          MAX_PROGRAM_INT, -MAX_PROGRAM_INT)
            elif isinstance(instr, (AllocateQueue, DeallocateQueue)):
                continue
    for fid, fused in netlist.fused_ops.items():
        fpath = f"fused_ops.{fid}"
        yield from _check(fused.inputs, f"{fpath}.inputs", MAX_FUSED_OPERANDS)
        yield from _check(fused.intermediates, f"{fpath}.intermediates", MAX_FUSED_OPERANDS)
        for s, schedule in enumerate(fused.schedules):
            for j, sub in enumerate(schedule):
                spath = f"{fpath}.schedules[{s}][{j}].{sub.name}"
                yield from _pair(sub.mblock, f"{spath}.mblock", MAX_MBLOCK_DIM)
                yield from _pair(sub.ublock, f"{spath}.ublock", MAX_UBLOCK_DIM)
                for index, tms in (sub.input_tms or {}).items():
                    yield from _tms(tms, f"{spath}.input_{index}_tms")
