"""What shape each op input must have, and the per-core L1 an op needs (netlist_backend_spec §2.3, §5.3).

Shared by the validator, the balancer (L1 fit of a candidate op model) and the golden backend (input
shapes after TMs).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Collection, Dict, Optional, Set

from pybuda.arch.tiles import tile_size_bytes
from pybuda.netlist.model import BINARY_OPS, COPY_OPS, MATMUL_OPS, SFPU_OPS, Execute, Netlist, NetlistOp
from pybuda.netlist.tms import TileShape3, tms_shape


def matmul_k(op: NetlistOp) -> int:
    """K in tiles = m_k · u_kt (also the reduced length of a reduce r/c)."""
    return op.m_k * op.u_kt


def matmul_input_t(op: NetlistOp) -> int:
    """t of matmul in0/in1: the output t, times z when ``accumulate`` sums z groups."""
    if op.attr("accumulate"):
        return op.t * int(op.attr("z", 1))
    return op.t


def expected_input_shape(op: NetlistOp, index: int) -> Optional[TileShape3]:
    """The (t, rt, ct) input ``index`` must have after its TMs, or None where the netlist does not pin it
    (sparse matmul, depthwise, splice, fused, embedding, tilizer, topk, matmul requant/dequant scalars)."""
    out = op.shape
    if op.type in COPY_OPS or op.type in SFPU_OPS or op.type in BINARY_OPS:
        return out
    if op.type in MATMUL_OPS:
        if op.attr("identity"):
            return None
        k = matmul_k(op)
        t_in = matmul_input_t(op)
        if index == 0:
            return TileShape3(t_in, out.rt, k)
        if index == 1:
            return TileShape3(t_in, k, out.ct)
        if index == 2 and op.attr("bias"):
            return out
        return None
    if op.type == "reduce":
        dim = op.attr("dim")
        if dim == "z":
            return TileShape3(out.t * int(op.attr("z", 1)), out.rt, out.ct)
        has_k = "m_k" in op.attributes or "u_kt" in op.attributes
        if dim == "r":
            return TileShape3(out.t, matmul_k(op), out.ct) if has_k else None
        if dim == "c":
            return TileShape3(out.t, out.rt, matmul_k(op)) if has_k else None
    return None


def input_shape_after_tms(netlist: Netlist, op: NetlistOp, index: int) -> TileShape3:
    """Shape of input ``index`` as the op sees it: the producer's shape after unpad, TMs and pad.
    Raises KeyError for an unknown producer and TMError when a TM does not apply."""
    shape = netlist.shape_of(op.inputs[index])
    return tms_shape(shape, op.tms_of(index), op.input_unpad.get(index), op.input_pad.get(index))


def prologue_inputs(netlist: Netlist, graph_name: str) -> Dict[str, Set[int]]:
    """For each op of a graph, the input indices fed by a queue some ``execute`` of the graph loads with
    ``prologue: true`` (a ``$variable`` prologue counts as not known, hence not prologue)."""
    graph = netlist.graphs[graph_name]
    loaded: Set[str] = set()
    for prog in netlist.programs:
        for instr in prog.instructions:
            if isinstance(instr, Execute) and instr.graph_name == graph_name:
                loaded |= {q for q, s in instr.queue_settings.items() if s.prologue is True}
    return {op.name: {i for i, inp in enumerate(op.inputs) if inp in loaded} for op in graph.ops.values()}


@dataclass
class L1Usage:
    """Bytes of L1 one core of an op needs, per buffer (``output``, ``intermed``, ``input_N``)."""

    op_name: str
    buffers: Dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        """Sum of all buffers in bytes."""
        return sum(self.buffers.values())


def sparse_table_tiles_per_core(index: int, queue_tiles: int, grid_r: int) -> int:
    """Tiles of a sparse matmul's constant table ``index`` (0: the unique picker tiles, 2: the index)
    one core needs: the index is sorted by output row, so each grid row holds only its own
    ``ceil(tiles / grid_r)`` share; the picker tiles are few and every core keeps them all."""
    if index == 2:
        return max(1, -(-queue_tiles // max(1, grid_r)))
    return max(1, queue_tiles)


def _input_tiles(op: NetlistOp, index: int, prologue: bool) -> int:
    """Tiles of input buffer ``index`` on one core (spec §5.3)."""
    mb_m, mb_n = op.mblock
    ub_r, ub_c = op.ublock
    kb = op.attr("kernel_broadcast") or op.attr("kernel_broadcast_per_t") or {}
    if f"input_{index}" in kb and kb[f"input_{index}"] > 0:
        return int(kb[f"input_{index}"])  # loaded once and reused
    if op.type in MATMUL_OPS and not op.attr("identity") and index in (0, 1):
        k = matmul_k(op)
        t_in = matmul_input_t(op)
        if prologue:
            # the whole per-core slice: a row strip of in0 or a column strip of in1, for every t
            return t_in * (mb_m * ub_r if index == 0 else mb_n * ub_c) * k
        single_ublock = op.attr("min_buffer_input") == index
        if index == 0:
            return 2 * (ub_r if single_ublock else mb_m * ub_r) * op.u_kt
        return 2 * op.u_kt * (ub_c if single_ublock else mb_n * ub_c)
    if op.type in MATMUL_OPS and op.attr("identity") and index == 1 and prologue:
        # a sparse matmul's resident activation: its K rows (m_k·u_kt) by this core's columns, for every t
        # (not the output block: a picker may gather a 1-row tensor into many rows, as ViT's class token)
        return matmul_input_t(op) * matmul_k(op) * mb_n * ub_c
    if op.type in MATMUL_OPS and index == 2 and op.attr("bias"):
        return (op.t if prologue else 1) * op.mblock_tiles
    if prologue:
        return op.t * op.mblock_tiles
    return 2 * op.ublock_tiles


def op_l1_usage(netlist: Netlist, op: NetlistOp, prologue: Collection[int] = ()) -> L1Usage:
    """Per-core L1 of ``op``: output buffer (buf_size_mb mblocks), intermediates when it accumulates,
    and each input buffer (double-buffered streaming, or resident if in ``prologue``), at least
    ``input_buf_min_size_tiles``. DRAM-IO buffers (``input_dram_io_buf_size_tiles``) live in the
    separate 100 KiB reservation and are not counted."""
    usage = L1Usage(op.name)
    tile_dim = op.effective_tile_dim
    usage.buffers["output"] = op.buf_size_mb * op.mblock_tiles * tile_size_bytes(op.out_df, tile_dim)
    if op.is_accumulating:
        usage.buffers["intermed"] = op.mblock_tiles * tile_size_bytes(op.intermed_df, tile_dim)
    if op.type == "fused_op":
        fused = netlist.fused_ops.get(op.attr("fused_op_id"))
        if fused is not None and fused.intermediates:
            per = max((s.ublock[0] * s.ublock[1] * (s.attributes.get("m_k", 1) if s.type in MATMUL_OPS else 1)
                       for sched in fused.schedules for s in sched), default=op.ublock_tiles)
            usage.buffers["intermed"] = fused.intermediates * per * tile_size_bytes(op.intermed_df, tile_dim)
    for index, df in enumerate(op.in_df):
        if index >= len(op.inputs):
            break
        tiles = _input_tiles(op, index, index in prologue)
        if index in prologue and op.type in MATMUL_OPS and op.attr("identity") and index in (0, 2) \
                and op.inputs[index] in netlist.queues:
            # a sparse matmul's constant tables: the picker tiles, and this core row's share of the index
            shape = netlist.queues[op.inputs[index]].shape
            tiles = sparse_table_tiles_per_core(index, shape.t * shape.rt * shape.ct, op.grid_size[0])
        if op.input_buf_min_size_tiles and index < len(op.input_buf_min_size_tiles):
            tiles = max(tiles, op.input_buf_min_size_tiles[index])
        try:
            in_tile_dim = netlist.queues[op.inputs[index]].effective_tile_dim if op.inputs[index] in netlist.queues \
                else netlist.find_op(op.inputs[index])[1].effective_tile_dim  # type: ignore[index]
        except TypeError:
            in_tile_dim = tile_dim
        usage.buffers[f"input_{index}"] = tiles * tile_size_bytes(df, in_tile_dim)
    return usage
