"""Which values may hold NaN or infinity, and keeping those that a NaN/infinity test or a comparison reads.

The chip's Float16_b and Float32 formats hold NaN and +-inf; the others do not: Float16 (fp16 "A") and the A
block formats saturate both to a finite number, and the B block formats turn a NaN into an infinity and flush
the rest of its 16-value block to zero (reference/netlist_backend_spec.md §4). With such a default format a NaN
made anywhere upstream of ``isnan(x)`` or ``x != y`` is gone by the time the test reads it: ``isnan(a / b)``
(``a * reciprocal(b)`` on the device) sees the reciprocal's infinity packed, multiplied and packed again.

:func:`hold_nonfinite` therefore walks up from every explicit NaN/infinity test (ops tagged ``TESTS_NONFINITE``
by :mod:`pybuda.frontend.aten_eltwise`: ``isnan``, ``isinf``, ``x != x`` ...) through every value that may hold
NaN or infinity, and tags it ``NONFINITE_SAFE``: the data-format pass keeps such ops in Float16_b or Float32
(output, intermediate and Dest), and such graph inputs are pushed in one of them where the default format holds
neither NaN nor infinity (:func:`held_format`). Values that cannot hold either stop the walk
(:func:`may_be_nonfinite`): integer data, masks, and constants whose values are all finite. A comparison
(:mod:`pybuda.passes.graph.decompose`: the differences it steps on are ``SIGN_EXACT``) holds only the values it
reads directly (through data movement): its own operands keep their NaNs and infinities, but the model above
them keeps the formats the user chose. Holding everything upstream of every comparison would move a whole
Bfp8_b network to Float16_b for one ``torch.where(x > 0, ...)``, to keep NaNs that only a model already
producing NaNs would have; a test for NaN is what asks for them. The cost is formats, never ops, and only
where the default format could not hold NaN or infinity anyway.

Data movement is the other place NaN and infinity are lost: a picker matmul (a slice inside a tile, a gather, a
concatenation at an unaligned offset) multiplies each infinity by the picker's zeros, and one NaN or infinity
makes whole rows or columns NaN. A picker can copy them exactly by a code (:mod:`pybuda.passes.lower.specials`),
at about 20 elementwise ops and one more picker each, so :func:`mark_nonfinite_carriers` chooses the values whose
pickers pay for it (``CARRIES_NONFINITE``): those downstream (through every op that may hold NaN or infinity,
:func:`may_be_nonfinite`) of

- a graph input whose compile sample held a NaN or an infinity (``SAMPLE_NONFINITE``: an attention mask of
  ``-inf``), a constant holding one (a registered mask buffer);
- a value a NaN/infinity test reads, directly or through the ops between (the values :func:`hold_nonfinite` walks
  up from a test): a model that asks ``isnan(x)`` expects ``x`` to hold NaNs.

Not every float value: ``may_be_nonfinite`` is true for nearly all float data (an input can hold anything, and
arithmetic can overflow), and protecting every picker would add its ops to every model with an unaligned slice or
concatenation; a model whose inputs and weights are finite and that never tests for NaN makes a NaN or infinity only
by overflowing or dividing by zero, where its results are wrong already. The NaN and infinity a model holds on
purpose come from its inputs and constants (masks, fill values: ``masked_fill(m, -inf)``'s constant) or are tested
for, and those are carried. A value a comparison reads is not a source (``x > 0`` asks for the sign of ordinary data).
The lowering zeroes a carrier's tile padding by a select, not a multiply (``inf * 0`` is NaN). Weights
(parameters) are taken to be finite: one holding an infinity makes NaN of every matmul reading it, and scanning
every weight would cost BERT-Large's compile a pass over 340M values.

Every other picker is compiled for finite values, and the host refuses a push of NaN or infinity into an input from
which one would reach such a picker (``FINITE_ONLY``, :mod:`pybuda.passes.lower.specials`), so a NaN or infinity
from an input never comes back as wrong values without an error, whatever the compile sample held. What is left
unprotected is a NaN or infinity made inside an untested model (an overflow, ``log(0)``) on its way to a picker.
"""

from __future__ import annotations

from typing import Callable, Dict, Optional

import torch

from pybuda.ir.graph import (CARRIES_NONFINITE, CONSTANT, INPUT, NONFINITE_SAFE, OP, OUTPUT, PARAMETER,
                             SAMPLE_NONFINITE, SIGN_EXACT, TESTS_NONFINITE, Graph, Node)
from pybuda.passes.context import CompileContext


def may_be_nonfinite(graph: Graph, name: str, memo: Optional[Dict] = None) -> bool:
    """False when node ``name`` of ``graph`` can hold neither NaN nor an infinity on the device: integer-valued
    data within Float32's exact range (integer and boolean inputs, masks, comparison results, argmax indices;
    :func:`pybuda.ops.integer.integer_range`) and constants whose every value is finite. True for everything
    else: float inputs and parameters (which the user may update) can hold anything, and float arithmetic can
    overflow to an infinity or make a NaN from finite operands. ``memo`` caches the integer-range analysis of
    one graph across calls."""
    from pybuda.ops.integer import integer_range

    node = graph[name]
    if node.dtype == torch.bool:
        return False
    if node.kind == CONSTANT and name in graph.tensors:
        value = graph.tensors[name]
        return value.dtype.is_floating_point and not bool(torch.isfinite(value).all())
    if node.kind == PARAMETER:
        return node.dtype.is_floating_point
    return integer_range(graph, name, memo) is None


#: Registry ops that move data without computing: a value read through them keeps its producer's format.
DATA_MOVES = frozenset({"reshape", "transpose", "squeeze", "unsqueeze", "nop", "identity", "broadcast", "select",
                        "index"})


def hold_nonfinite(graph: Graph, ctx: CompileContext) -> Graph:
    """Tag every value that may hold NaN or infinity and that a NaN/infinity test reads, directly or through
    other ops, or that a comparison reads directly (through data movement); see the module docstring. Returns
    ``graph`` (tagged in place)."""
    memo: Dict = {}
    held = set()
    # (value, whether the walk goes on past its producer): a test's values are walked to their sources, a
    # comparison's only to the op that makes them.
    stack = [(o, bool(node.tags.get(TESTS_NONFINITE))) for node in graph.ops if node.tags.get(SIGN_EXACT)
             for o in node.operands]
    for name, _ in stack:
        node = graph[name]
        if node.kind == CONSTANT and node.dtype.is_floating_point:
            # What a comparison steps on is compared as the framework has it: ``x < 1e30`` against 1e30 itself, not
            # its rounding in the default format (a block format keeps 7 bits of it)
            node.tags.setdefault("exact_df", "Float32")
    while stack:
        name, upstream = stack.pop()
        if (name, upstream) in held or (name, True) in held:
            continue
        held.add((name, upstream))
        node = graph[name]
        if not may_be_nonfinite(graph, name, memo):
            continue
        if upstream:  # a test reads what it holds: data movement carries it (mark_nonfinite_carriers)
            node.tags[CARRIES_NONFINITE] = True
        if node.kind == OP:
            node.tags[NONFINITE_SAFE] = True
            if upstream or node.op_type in DATA_MOVES:
                stack.extend((o, upstream) for o in node.operands)
        elif node.kind in (INPUT, PARAMETER, CONSTANT) and node.dtype.is_floating_point:
            df = held_format(ctx, node.dtype)
            if df is not None:
                node.tags.setdefault("exact_df", df)
    return graph


def mark_nonfinite_carriers(graph: Graph, ctx: CompileContext) -> Graph:
    """Tag ``CARRIES_NONFINITE`` every value downstream of a NaN or infinity the model holds on purpose (see the
    module docstring): inputs tagged ``SAMPLE_NONFINITE``, constants holding one, and the values
    :func:`hold_nonfinite` tagged upstream of a NaN/infinity test (run it first). Returns ``graph`` (tagged in
    place); ``ctx.notes["nonfinite_carriers"]`` counts the tagged nodes."""
    memo: Dict = {}

    def source(node: Node) -> bool:
        if node.tags.get(CARRIES_NONFINITE):
            return True
        if node.kind == INPUT:
            return bool(node.tags.get(SAMPLE_NONFINITE))
        if node.kind == CONSTANT:
            value = graph.tensors.get(node.name)
            return value is not None and value.dtype.is_floating_point and not bool(torch.isfinite(value).all())
        return False

    def passes_on(node: Node) -> bool:  # an output: the nop that writes it to the host must keep them too
        return node.kind == OUTPUT or (node.kind == OP and may_be_nonfinite(graph, node.name, memo))

    ctx.notes["nonfinite_carriers"] = tag_downstream(graph, CARRIES_NONFINITE, source, passes_on)
    return graph


def tag_downstream(graph: Graph, tag: str, source: Callable[[Node], bool], passes_on: Callable[[Node], bool]) -> int:
    """Tag ``tag`` every node ``source`` accepts and, in topological order, every node ``passes_on`` accepts that
    reads a tagged operand (``passes_on`` is asked only then). Returns the number of tagged nodes."""
    count = 0
    for node in graph:  # topological: operands first
        if source(node) or (any(graph[o].tags.get(tag) for o in node.operands) and passes_on(node)):
            node.tags[tag] = True
            count += 1
    return count


def mark_nonfinite_samples(graph: Graph, samples) -> None:
    """Tag ``SAMPLE_NONFINITE`` each float input of ``graph`` whose sample (``samples``, in ``graph.inputs``
    order) holds a NaN or an infinity."""
    for node, value in zip(graph.inputs, samples):
        if isinstance(value, torch.Tensor) and value.dtype.is_floating_point and not bool(torch.isfinite(value).all()):
            node.tags[SAMPLE_NONFINITE] = True


def held_format(ctx: CompileContext, dtype: torch.dtype) -> Optional[str]:
    """The format a queue of ``dtype`` data that may hold NaN or infinity is kept in, or None when its default
    (``default_df_override``, else Float16_b for float32 data and its own format for 16-bit data) holds them:
    Float16_b in place of a block format (as precise), Float32 in place of Float16 (Float16_b is less precise).
    Only the formats change: the values stay the default's precision class, so comparisons of them fuse as
    before."""
    from pybuda.dtypes import DataFormat as DF

    override = ctx.config.default_df_override
    if override is None:
        return "Float32" if dtype == torch.float16 else None  # Float16 saturates; Float16_b and Float32 hold both
    df = DF.from_json(override)
    if df in (DF.Float16_b, DF.Float32):
        return None
    return "Float32" if df == DF.Float16 else "Float16_b"
