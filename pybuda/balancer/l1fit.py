"""The blocking and L1 fit of one layout: how much L1 an op model of one (t-streaming, grid) choice needs, and
the best blocking of that choice that fits.

Per (t-stream, grid) of an op (enumerated by :mod:`pybuda.balancer.legalizer`) one **blocking**:

* the largest ublock within the Dest limit (``ublock_rt·ublock_ct ≤ 8``, ≤ 4 with a Float32/Int32
  accumulator; spec §1.3) dividing the per-core block, ``ublock_order r``;
* for matmuls and r/c reduces ``u_kt·m_k = K`` with the largest ``u_kt`` that fits L1 (all divisors
  of K are tried when ``enable_enumerate_u_kt``, else K and 1);
* ``buf_size_mb`` 2, or 1 when 2 does not fit L1 or does not divide/multiply ``t`` (net2pipe's
  "divisible either direction" rule);
* parameters resident in L1 (prologue) when they fit, largest parameters moved to DRAM first;

checked per core with the buffer sizes of spec §5.3 in each operand's data format against
``DeviceDescriptor.l1_pybuda_budget_bytes`` (op-buffer space minus PyBuda's 100 KiB DRAM-IO reserve).

:class:`L1Fit` is mixed into :class:`~pybuda.balancer.legalizer.Legalizer`, which supplies ``config``,
``budget`` and ``_model`` (the op model of a fitting blocking, priced). :class:`_Diag` collects why
layouts were rejected, for the legalizer's error messages.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, List, Optional, Sequence, Tuple

from pybuda.perf import cost
from pybuda.balancer.blocking import divisors, sparse_u_kts, ublock_candidates
from pybuda.balancer.edges import MATMUL_TYPES as _MATMUL, divisible_either_direction, stacks_ok
from pybuda.balancer.types import OpModel

if TYPE_CHECKING:
    from pybuda.balancer.legalizer import OpFacts

_PARAM_KINDS = frozenset({"parameter", "constant"})


class L1Fit:
    """The L1 side of :class:`~pybuda.balancer.legalizer.Legalizer`: buffer sizes and the blocking that fits."""

    # -- one (stream, grid) -------------------------------------------------------------------------
    def _fit(self, op: Any, f: OpFacts, override: Any, t: int, stream: Tuple[int, int], gr: int, gc: int,
             dest: int, diag: "_Diag") -> Optional[OpModel]:
        """The best legal blocking of one (t-stream, grid) choice, or None if nothing fits L1.

        Preference: the largest ublock, then parameters in prologue (largest moved to DRAM first), then
        the largest u_kt, then double buffering."""
        rows = (f.rt // stream[0]) // gr
        cols = (f.ct // stream[1]) // gc
        has_k = f.type in _MATMUL or (f.type == "reduce" and f.reduce_dim in ("r", "c"))
        if not has_k:
            u_kts: Sequence[int] = (1,)
        elif override is not None and override.u_kt is not None:
            u_kts = (int(override.u_kt),)
        elif f.untilize and f.type in _MATMUL:
            # the untilizer packs rows of whole output tiles once: an untilizing matmul cannot spill
            # partial sums over several K blocks, so m_k must be 1 (netlist rule untilize_output)
            u_kts = (f.k,)
        elif self.config.enable_enumerate_u_kt:
            u_kts = divisors(f.k)[::-1]
        else:
            u_kts = tuple(sorted({f.k, 1}, reverse=True))
        if f.sparse and has_k and (override is None or override.u_kt is None):
            u_kts = sparse_u_kts(f.k, u_kts)
        out_mult = override.output_buffer_multiplier if override is not None else None
        if out_mult:
            bufs: Sequence[int] = (int(out_mult),)
        else:
            bufs = tuple(b for b in (2, 1) if divisible_either_direction(b, t))
        in_mult = dict(override.input_buffer_multiplier) if override is not None else {}
        params = [i for i, kind in enumerate(f.in_kinds) if kind in _PARAM_KINDS]
        force_dram = override.force_dram_parameters if override is not None else None
        if force_dram is None:
            force_dram = bool(self.config.default_dram_parameters)
        tile_out = cost.tile_size_bytes(f.out_df)
        n_in = f.n_inputs
        in_tiles = [cost.tile_size_bytes(f.in_dfs[i] if i < len(f.in_dfs) else f.out_df) for i in range(n_in)]
        interm_tile = cost.tile_size_bytes(f.intermed_df)
        # an intermediate (partial-sum) buffer: matmuls spilling over K blocks or with a bias, reduces over
        # several K blocks, gradient accumulation
        interm_always = f.gradient_op or (f.type in _MATMUL and f.has_bias)
        interm_if_mk = f.type in _MATMUL or f.type == "reduce"
        min_buf = min(bufs)
        t_in = t  # t of the operands (matmul accumulate is not streamed; its z is folded into K blocking)
        for ur, uc in ublock_candidates(rows, cols, dest, f.type != "reduce" or f.reduce_dim != "c"):
            mb = (rows // ur, cols // uc)
            mb_tiles = mb[0] * mb[1] * ur * uc
            fixed = 0
            if f.fused_intermediates:
                fixed += f.fused_intermediates * ur * uc * f.fused_max_m_k * interm_tile
            # Prologue footprint of each parameter: its per-core slice for every t (as the netlist
            # validator sizes a resident buffer).
            prologue_bytes = {i: self._prologue_tiles(f, i, t_in, mb[0] * ur, mb[1] * uc, gr) * in_tiles[i]
                              for i in params}
            prologue_sets: List[Tuple[int, ...]] = []
            if params and not force_dram:
                current = sorted(params)
                while current:
                    prologue_sets.append(tuple(current))
                    current = sorted(sorted(current, key=lambda i: prologue_bytes[i])[:-1])
            prologue_sets.append(())
            out_bytes = mb_tiles * tile_out
            for pset in prologue_sets:
                streamed = [(i, in_mult.get(i, 1) * in_tiles[i]) for i in range(n_in) if i not in pset]
                base = sum(prologue_bytes[i] for i in pset) + fixed

                def inputs_l1(u_kt: int) -> int:
                    """L1 bytes of this blocking with ``u_kt`` but the output buffers: prologue, streamed
                    input buffers, intermediates."""
                    in_bytes = base
                    for i, scale in streamed:
                        in_bytes += self._stream_buffer_tiles(f, i, ur, uc, mb, u_kt) * scale
                    if interm_always or (interm_if_mk and has_k and -(-f.k // u_kt) > 1):  # m_k > 1 (K may be padded)
                        in_bytes += mb_tiles * interm_tile
                    return in_bytes

                # Every input buffer grows with u_kt, and the intermediate buffer is there for every
                # u_kt < K: the least L1 of this blocking is at u_kt = K or at the smallest u_kt, with
                # the fewest output buffers. When that does not fit, nothing below does.
                least = min(inputs_l1(u_kts[0]), inputs_l1(u_kts[-1])) + min_buf * out_bytes
                if least > self.budget:
                    diag.saw(least)
                    continue
                for u_kt in u_kts:
                    m_k = -(-f.k // u_kt) if has_k else 1  # a sparse matmul's K may be padded (sparse_u_kts)
                    in_bytes = inputs_l1(u_kt)
                    for buf in bufs:
                        l1 = buf * out_bytes + in_bytes
                        if l1 > self.budget:
                            diag.saw(l1)
                            continue
                        model = OpModel(grid_shape=(gr, gc), t=t, mblock=mb, ublock=(ur, uc), u_kt=u_kt, m_k=m_k,
                                        buf_size_mb=buf, t_stream_factor=stream)
                        if f.stacked_inputs and not all(
                                stacks_ok(shape, tms, f.type, i, model, f.bias_attr)
                                for i, shape, tms in f.stacked_inputs):
                            diag.stacks = True
                            break  # another u_kt or ublock may line up with the stacked slices
                        model = self._model(op, f, t, stream, (gr, gc), mb, (ur, uc), u_kt, m_k, buf, pset,
                                            tuple(i for i in params if i not in pset), l1, override)
                        k_pad = m_k * u_kt - f.k if has_k else 0
                        if k_pad:  # zero rows of in1 the index never names
                            model = dataclasses.replace(model, input_padding=tuple(
                                (k_pad, 0) if i == 1 else (0, 0) for i in range(n_in)))
                        return model
        return None

    @classmethod
    def _prologue_tiles(cls, f: OpFacts, i: int, t: int, rows: int, cols: int, grid_r: int) -> int:
        """Tiles of parameter ``i`` resident in L1 on one core: its per-core slice for every t. A sparse
        matmul's picker tiles and index are tables the kernel walks for every t: each core keeps the
        picker tiles and its grid row's share of the index (cost.sparse_table_tiles_per_core, the same
        figure the netlist validator's L1 rule uses)."""
        if f.sparse and i != 1:
            raw = f.in_raw[i][1] if i < len(f.in_raw) else 0
            return cost.sparse_table_tiles_per_core(i, raw, grid_r)
        return t * cls._operand_slice_tiles(f, i, rows, cols)

    @staticmethod
    def _operand_slice_tiles(f: OpFacts, i: int, rows: int, cols: int) -> int:
        """Tiles of operand ``i`` one core reads per t-slice (spec §2.3 operand shapes)."""
        if f.type in _MATMUL:
            if i == 0:
                return rows * f.k
            if i == 1:
                return f.k * cols
            return rows * cols
        if f.type == "reduce":
            return f.k * cols if f.reduce_dim == "r" else rows * f.k if f.reduce_dim == "c" else rows * cols
        return rows * cols

    @staticmethod
    def _stream_buffer_tiles(f: OpFacts, i: int, ur: int, uc: int, mb: Tuple[int, int], u_kt: int) -> int:
        """Input buffer of a streamed operand (spec §5.3): matmul in0 one ublock column of the K block,
        in1 one ublock row, bias one output mblock; reduce r/c a K block; others 2 ublocks.

        A sparse matmul's in0 (picker tiles) and in2 (index) are consumed in index order, not as a
        rows x K strip: streamed, each needs a double-buffered strip for one ublock row of one K block
        (``2·ublock_rt·u_kt`` picker tiles, 2 index tiles), never more than the whole queue and never
        less than the validator's generic 2 ublocks. Its in1, the activation, streams like a dense in1."""
        if f.sparse and i != 1:
            raw = f.in_raw[i][1] if i < len(f.in_raw) else 1 << 30
            strip = min(raw, 2 * ur * u_kt if i == 0 else 2)
            return max(strip, 2 * ur * uc)
        if f.type in _MATMUL:
            if i == 0:
                return 2 * mb[0] * ur * u_kt
            if i == 1:
                return 2 * u_kt * mb[1] * uc
            if i == 2 and f.has_bias:
                return mb[0] * mb[1] * ur * uc
            return 2 * ur * uc
        if f.type == "reduce" and f.reduce_dim in ("r", "c"):
            return 2 * u_kt * (uc if f.reduce_dim == "r" else ur)
        return 2 * ur * uc


class _Diag:
    """Collects why layouts were rejected, for error messages."""

    def __init__(self) -> None:
        self.min_l1: Optional[int] = None
        self.stacks = False

    def saw(self, l1: int) -> None:
        if self.min_l1 is None or l1 < self.min_l1:
            self.min_l1 = l1
