"""Copying pickers that carry NaN and +-inf exactly (a mixin of the lowering pass).

A picker matmul copies a datum by multiplying it by 1 and every other datum of its row or column by 0; the matrix
unit makes NaN of ``0 * inf``, so one NaN or infinity in the data makes NaN of every output the picker computes
from its tile row or column (``x[:, 3:40:2, 5:37]`` of a 48x48 mask of ``-inf``: 576 wrong values of 608). A
copying picker (one 1 per output, :data:`~pybuda.passes.lowered.exact_pickers.COPIES_INPUT`) whose data may hold
them (``CARRIES_NONFINITE``, :func:`pybuda.passes.graph.nonfinite.mark_nonfinite_carriers`) instead copies two
finite channels with the same picker constants and rebuilds the specials after::

    d  = x - x                  0 where x is finite, NaN where it is not
    xf = heaviside(d, x)        x where finite, 0 elsewhere (heaviside steps NaN to 0, picks its 2nd operand at 0)
    c  = heaviside(0 - heaviside(d, 1), 3 - 2 heaviside(x, 0) - heaviside(0 - x, 0))
                                0 finite, 1 +inf, 2 -inf, 3 NaN (the code of x where it is not finite, else 0)

    P(xf), P(c)                 both finite: the picker copies them (P(c) exactly: small integers)
    t = P(c) - 2,  h = heaviside(t, 1),  B = h - 1,  A = (t - h) - B
                                A is 0 at +inf and NaN, B at -inf and NaN, both -1 or -2 elsewhere
    out = P(xf) + heaviside(A, +inf) + heaviside(B, -inf)   (+inf + -inf: NaN)

Every op is an elementwise subtract, add or heaviside of the device-op table, whose golden kernels are IEEE's (no
multiply: the multiplier's fidelity never touches the data); the ops are tagged ``NONFINITE_SAFE``, so they keep
Float16_b or Float32, which hold NaN and infinity, and the ``+-inf`` fill constants are Float16_b. Nothing depends
on the Dest format's rounding (Grayskull's Float16_b Dest rounds ``xf``, as it rounds the picker's result anyway):
where x is finite only heaviside's selection counts, and the codes are small integers. Outputs nobody picks (a zero
column of the picker, tile padding) decode as 0, and padding holding junk infinities is copied as zeros. Float32
data: the finite channel's picker keeps ``COPIES_INPUT``, so :mod:`~pybuda.passes.lowered.exact_pickers` still
copies it in exact pieces; the code channel's does not (its values are exact in any format).

Cost: 20 elementwise ops (11 to encode, 9 to decode; fusion makes about 8 ops of them) and one more picker per
picker, and nothing in a graph where no value carries NaN or infinity: the netlists of ordinary models do not change.
A picker reading another one's result (rows, then columns) picks its two channels, a value read by several pickers is
encoded once, and the parts of a gather (pickers whose results are summed, each zero where another writes) are summed
channel by channel (the codes of disjoint parts add up to the code): one encode and one decode per chain or gather. The im2col picker of a convolution or a max pool copies too (the convolution then multiplies the infinities
as torch does, and a max pool takes their maximum). Pickers that sum or scale (an average pool, a sum over a leading
dim) are left alone, as are pickers of values not carried (:func:`~pybuda.passes.graph.nonfinite.mark_nonfinite_carriers`):
an input from which a NaN or infinity would reach one is ``FINITE_ONLY``, and the host refuses a push holding one
(:meth:`NonfiniteMoveLowering.mark_finite_only_inputs`).
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import partial
from typing import Callable, Dict, List, Optional, Tuple, Union

import torch

from pybuda.ir.graph import CARRIES_NONFINITE, CONSTANT, HOLDS_MASK_FILL, NONFINITE_SAFE, Node
from pybuda.netlist.host_io import tiles
from pybuda.netlist.tms import TM, Broadcast
from pybuda.passes.lower.common import DVal
from pybuda.passes.lowered.exact_pickers import COPIES_INPUT, ONE_HOT_COPY, is_selection

#: Tag on the ops that carry a picker's NaNs and infinities: the name of the picker ("fill" on the constants).
NONFINITE_PART = "nonfinite_part"
#: Tag on an input queue whose NaNs and infinities would reach a picker that does not carry them: the host refuses
#: a push holding one (:class:`pybuda.netlist.host_io.QueueIO` ``finite_only``).
FINITE_ONLY = "finite_only"
#: The code of a NaN (0 finite, 1 +inf, 2 -inf).
_NAN = 3.0

Operand = Union[DVal, float]


class NonfiniteMoveLowering:
    """Methods of the lowering pass that make a copying picker carry NaN and infinity (see the module docstring)."""

    def producer_tags(self, v: DVal) -> dict:
        """The tags of ``v``'s producer (op, pending queue or queue); empty for an unknown one."""
        if v.src in self.bg.ops:
            return self.bg.ops[v.src].tags
        if v.src in self.pending:
            return self.pending[v.src][2]
        q = self.bg.queues.get(v.src)
        return q.tags if q is not None else {}

    def carries_nonfinite(self, v: DVal) -> bool:
        """Whether ``v``'s producer (op or queue) is tagged ``CARRIES_NONFINITE``."""
        return bool(self.producer_tags(v).get(CARRIES_NONFINITE))

    def copy_tags(self, v: DVal) -> dict:
        """Tags for an op that copies ``v`` (a nop applying its TMs, the zeroing of its tile padding): what ``v``
        holds, the copy holds, whichever node it is emitted for. A copy of scores holding a mask's fill
        (``HOLDS_MASK_FILL``) emitted for the softmax's ``exp`` took the block format of the ``exp`` and flushed
        the unmasked scores beside the fill to zero."""
        return {HOLDS_MASK_FILL: True} if self.producer_tags(v).get(HOLDS_MASK_FILL) else {}

    def copy_nonfinite(self, v: DVal, name: str, pick: Callable[[DVal, str, Dict], DVal], tags: Dict) -> DVal:
        """The copying picker ``pick(data, name, tags)`` applied to ``v`` so that NaN and infinity come through.

        ``v`` read from another such picker (a strided slice: rows, then columns) is picked from that picker's two
        channels, with ``v``'s TMs: the specials are decoded once, after the last picker (the decode of the first
        is dropped when nothing else reads it, :meth:`drop_unread_nonfinite_parts`)."""
        pairs = self.cache.setdefault(("nonfinite_pairs",), {})
        pair = pairs.get(v.src)
        if pair is not None:
            xf, code = replace(v, src=pair[0].src), replace(v, src=pair[1].src)
        else:  # one encoding of a value however many pickers read it (the parts of a concatenation)
            key = ("nonfinite_encode", v.src, v.tms, v.z, v.r, v.c)
            if key not in self.cache:
                self.cache[key] = self._encode_nonfinite(v, name)
            xf, code = self.cache[key]
        finite = pick(xf, f"{name}.finite", {**tags, NONFINITE_PART: name})
        # The codes are exact in any format: a picker tag keeps exact_pickers from copying them in pieces.
        code_tags = {k: val for k, val in tags.items() if k != COPIES_INPUT}
        code_tags.setdefault("picker", "one_hot")
        codes = pick(code, f"{name}.codes", {**code_tags, NONFINITE_PART: name})
        out = self._decode_nonfinite(finite, codes, name)
        pairs[out.src] = (finite, codes)
        return out

    def sum_nonfinite(self, name: str, parts: List[DVal], pads: List[Tuple[str, str]]) -> Optional[DVal]:
        """The sum of coded pickers' results ``parts`` (each zero wherever another writes: the parts of a gather) as
        the sums of their two channels, decoded once; None unless every part is such a result. ``pads``: the
        padding of each partial sum."""
        pairs = self.cache.get(("nonfinite_pairs",), {})
        if len(parts) < 2 or any(p.src not in pairs for p in parts):
            return None
        channels = []
        for c, label in ((0, "finite"), (1, "codes")):
            out = replace(parts[0], src=pairs[parts[0].src][c].src)
            for i, p in enumerate(parts[1:], start=1):
                out = self.emit(f"{name}.{label}{i}", "add", [(out, ()), (replace(p, src=pairs[p.src][c].src), ())],
                                (out.z, out.r, out.c), pad=pads[i - 1], layout=out.layout, spatial=out.spatial,
                                tags={NONFINITE_SAFE: True, NONFINITE_PART: name})
            channels.append(out)
        out = self._decode_nonfinite(channels[0], channels[1], name)
        pairs[out.src] = (channels[0], channels[1])
        return out

    def drop_unread_nonfinite_parts(self) -> None:
        """Remove the ops and fill constants of :meth:`copy_nonfinite` that nothing reads (the decode of a picker
        whose only reader was another such picker)."""
        if not self.cache.get(("nonfinite_pairs",)):
            return  # no coded picker
        while True:
            readers = self.bg.reader_map()
            unread = [n for n, op in self.bg.ops.items() if NONFINITE_PART in op.tags and not readers.get(n)]
            unread += [n for n, q in self.bg.queues.items() if NONFINITE_PART in q.tags and not readers.get(n)]
            if not unread:
                return
            for n in unread:
                self.bg.ops.pop(n, None)
                if self.bg.queues.pop(n, None) is not None:
                    self.bg.tensors.pop(n, None)

    def one_hot_copy(self, node: Node) -> Optional[int]:
        """The operand a two-operand IR matmul ``node`` copies, or None: the other operand is a constant one-hot
        selection matrix (a flip, a gather by a constant permutation: :func:`pybuda.frontend.aten_index.const_gather`),
        ``x @ S`` with at most one 1 in each column of ``S`` or ``S @ x`` with at most one in each row."""
        for const, data in ((1, 0), (0, 1)):
            leaf = self.g[node.operands[const]]
            matrix = self.g.tensors.get(leaf.name) if leaf.kind == CONSTANT else None
            if matrix is None or matrix.dim() < 2 or not matrix.dtype.is_floating_point or not matrix.numel():
                continue
            if is_selection(matrix, const):
                return data
        return None

    def mark_finite_only_inputs(self) -> None:
        """Tag ``FINITE_ONLY`` each float input queue from which a NaN or infinity can reach the data input of a
        picker that multiplies it by zeros and does not carry it (a sparse row picker, a column picker, a one-hot
        matmul: all of them where the input is not carried, one that sums or scales where it is): the host refuses
        a push that would come back wrong. The walk goes through every op except those whose values are integers (a
        comparison's 0/1 result holds no NaN)."""
        from pybuda.passes.graph.nonfinite import may_be_nonfinite

        if not any(_zeroes_input(op, i) for op in self.bg.ops.values() for i in range(len(op.inputs))):
            return  # no picker to reach (BERT): no walk
        readers = self.bg.reader_map()
        memo: Dict = {}
        for name in self.bg.input_order:
            q = self.bg.queues[name]
            if q.tags.get("integer_values") or q.tags.get("dtype") == "bool":
                continue
            seen, stack = set(), [name]
            while stack and not q.tags.get(FINITE_ONLY):
                src = stack.pop()
                for reader in readers.get(src, ()):
                    op = self.bg.ops.get(reader)
                    if op is None or reader in seen:
                        continue
                    seen.add(reader)
                    if any(n == src and _zeroes_input(op, i) for i, n in enumerate(op.inputs)):
                        q.tags[FINITE_ONLY] = True
                        break
                    node = op.tags.get("ir_node")
                    if node is None or node not in self.g.nodes or may_be_nonfinite(self.g, node, memo):
                        stack.append(reader)

    # --- the two channels ----------------------------------------------------------------------------------------
    def _encode_nonfinite(self, v: DVal, name: str):
        """(xf, c) of ``v``: its finite part and the code of its NaNs and infinities (see the module docstring)."""
        op = partial(self._nonfinite_op, part=name)
        d = op(f"{name}.nf_self_diff", "subtract", v, v, v)
        xf = op(f"{name}.nf_finite", "heaviside", d, v, v)
        finite = op(f"{name}.nf_is_finite", "heaviside", d, 1.0, v)
        special = op(f"{name}.nf_special", "subtract", 0.0, finite, v)  # 0 where x is not finite, -1 elsewhere
        pos = op(f"{name}.nf_pos", "heaviside", v, 0.0, v)  # 1 at +inf, 0 at -inf and NaN
        neg = op(f"{name}.nf_neg", "heaviside", op(f"{name}.nf_minus", "subtract", 0.0, v, v), 0.0, v)  # 1 at -inf
        code = op(f"{name}.nf_code_a", "subtract", _NAN, pos, v)
        code = op(f"{name}.nf_code_b", "subtract", code, pos, v)
        code = op(f"{name}.nf_code_c", "subtract", code, neg, v)
        return xf, op(f"{name}.nf_code", "heaviside", special, code, v)

    def _decode_nonfinite(self, finite: DVal, codes: DVal, name: str) -> DVal:
        """``finite`` with the NaNs and infinities ``codes`` name put back (see the module docstring)."""
        op = partial(self._nonfinite_op, part=name)
        t = op(f"{name}.nf_t", "subtract", codes, 2.0, finite)  # -2 finite, -1 +inf, 0 -inf, 1 NaN
        h = op(f"{name}.nf_h", "heaviside", t, 1.0, finite)  # 1 at -inf and NaN
        b = op(f"{name}.nf_b", "subtract", h, 1.0, finite)  # 0 at -inf and NaN
        u = op(f"{name}.nf_u", "subtract", t, h, finite)
        a = op(f"{name}.nf_a", "subtract", u, b, finite)  # 0 at +inf and NaN
        pos = op(f"{name}.nf_pos", "heaviside", a, float("inf"), finite)
        neg = op(f"{name}.nf_neg_inf", "heaviside", b, -float("inf"), finite)
        out = op(f"{name}.nf_sum", "add", finite, pos, finite)
        return op(name, "add", out, neg, finite)

    def _nonfinite_op(self, name: str, kind: str, a: Operand, b: Operand, like: DVal, part: str) -> DVal:
        """Elementwise ``kind`` of ``a`` and ``b`` (a value, or a number filled over ``like``'s shape), one of the
        ops of picker ``part``."""
        inputs = [self._nonfinite_operand(x, like) for x in (a, b)]
        return self.emit(name, kind, inputs, (like.z, like.r, like.c), pad=(like.pad_r, like.pad_c),
                         layout=like.layout, spatial=like.spatial, tags={NONFINITE_SAFE: True, NONFINITE_PART: part})

    def _nonfinite_operand(self, x: Operand, like: DVal):
        """An operand of :meth:`_nonfinite_op`: a value as it is, or a number as one Float16_b tile of it broadcast
        over ``like`` (Float16_b holds the small codes and the infinities)."""
        if isinstance(x, DVal):
            return (x, ())
        key = ("nonfinite_fill", x)
        label = ("neg_inf" if x < 0 else "inf") if math.isinf(x) else str(int(x))
        fill = self._const(key, f"nonfinite_fill_{label}", torch.full((32, 32), x),
                           {"exact_df": "Float16_b", NONFINITE_PART: "fill"})
        tms: List[TM] = []
        if like.z > 1:
            tms.append(Broadcast(dim="z", factor=like.z))
        if tiles(like.r) > 1:
            tms.append(Broadcast(dim="r", factor=tiles(like.r)))
        if tiles(like.c) > 1:
            tms.append(Broadcast(dim="c", factor=tiles(like.c)))
        return (fill, tuple(tms))


def _zeroes_input(op, index: int) -> bool:
    """Whether ``op`` multiplies its input ``index`` by the zeros of a picker: the data of a sparse row picker (input
    1 of an ``identity`` matmul), of a column picker (input 0) or of a matmul with a one-hot constant."""
    if op.type != "matmul" or op.tags.get(NONFINITE_PART):
        return False
    if op.attrs.get("identity"):
        return index == 1
    if op.tags.get("picker") == "column":
        return index == 0
    return op.tags.get(ONE_HOT_COPY) == index
