"""Values that hold a mask's fill beside ordinary data keep a format with an exponent per datum.

A block format (Bfp8_b, Bfp4_b, ... and the A family) stores the 16 datums of a tile row's face with one shared
exponent, the largest of the 16: a datum 2**7 times smaller than its block's largest keeps no bit of Bfp8_b's
mantissa and reads back as zero. An attention mask puts exactly such a pair in one block: a fill of ``-inf`` or a
finite stand-in (``-1e9``, ``torch.finfo(float32).min``, BERT's ``-10000``) beside the scores it masks. In a block
format the fill takes the block's exponent and the unmasked scores of its block flush to zero (B formats also turn
a block holding an infinity into infinities), so a masked softmax at ``default_df_override=Bfp8_b`` came back
wrong with no error: ``softmax(x.masked_fill(m, -inf))`` at PCC 0.56, an additive ``finfo.min`` mask at 0.63,
SDPA with a boolean mask at 0.65 (wh_n150). The chip would compute the same; the compiler chooses otherwise.

:func:`hold_mask_fills` tags ``HOLDS_MASK_FILL`` every value that may hold a fill beside ordinary data, and the
data-format pass gives such ops Float16_b (Float16 for an A-family default) in place of a block format; a graph
input or constant that is a source is stored so too (``exact_df``), or, when it holds NaN or an infinity, in a format
that holds them (:func:`pybuda.passes.graph.nonfinite.held_format`: Float32 in place of a Float16 default too, whose
saturation would make a row masked entirely a uniform one). Sources are float constants and graph inputs
(by their compile sample) holding a NaN, an infinity or a magnitude of at least :data:`FILL_MAGNITUDE`. The tag
follows only ops that pass such a value on as it is or shifted by ordinary data (:data:`PASS_ON`: data movement,
add/subtract/multiply, select, max/min, clip, relu): a softmax's ``x - max`` is held, its ``exp`` (where the fill
becomes an exact zero) is not, and a matmul ends the walk (what it makes of a fill is no mask any more). The cost
is formats only, and only in models with such fills and a block-format default; BERT-base's netlist is unchanged
at every default format without a mask fill.
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence

import torch

from pybuda.ir.graph import CONSTANT, HOLDS_MASK_FILL, INPUT, OP, SAMPLE_FILL, SAMPLE_NONFINITE, Graph
from pybuda.ops import registry
from pybuda.passes.context import CompileContext
from pybuda.passes.graph.nonfinite import held_format, tag_downstream

#: Smallest magnitude of a fill: 2**13, below BERT's -10000 and far above ordinary activations of a masked score.
FILL_MAGNITUDE = 8192.0
#: Ops whose output may hold an operand's fill unchanged or shifted by ordinary data (besides data movement).
PASS_ON = frozenset({"add", "subtract", "multiply", "maximum", "minimum", "heaviside", "where", "abs", "clip",
                     "relu", "leaky_relu", "nop", "identity", "buffer", "cast", "dropout", "reduce_max",
                     "max_pool1d", "max_pool2d", "max_pool3d"})


def holds_fill(value: torch.Tensor) -> bool:
    """Whether float tensor ``value`` holds a NaN, an infinity or a magnitude of at least :data:`FILL_MAGNITUDE`."""
    if not value.dtype.is_floating_point or value.numel() == 0:
        return False
    return not bool(torch.isfinite(value).all()) or bool(value.abs().max() >= FILL_MAGNITUDE)


def mark_fill_samples(graph: Graph, samples: Sequence) -> None:
    """Tag ``SAMPLE_FILL`` each float input of ``graph`` whose sample (``samples``, in ``graph.inputs`` order) holds a
    fill (:func:`holds_fill`): a mask pushed as data."""
    for node, value in zip(graph.inputs, samples):
        if isinstance(value, torch.Tensor) and holds_fill(value):
            node.tags[SAMPLE_FILL] = True


def hold_mask_fills(graph: Graph, ctx: CompileContext) -> Graph:
    """Tag ``HOLDS_MASK_FILL`` the sources (constants holding a fill, inputs tagged ``SAMPLE_FILL``) and the values
    they reach through :data:`PASS_ON` and data movement (see the module docstring). Nothing is held where the
    default format holds both fills and ordinary data. Returns ``graph`` (tagged in place);
    ``ctx.notes["mask_fill_values"]`` counts the tagged nodes."""
    held_df = _per_datum_format(ctx)
    # source name -> the format it is stored in: one holding NaN and infinity for a source holding either (where the
    # default holds neither: held_format), else one with an exponent per datum (where the default is a block format)
    sources: Dict[str, str] = {}
    for node in graph:
        if node.kind not in (INPUT, CONSTANT) or not (held_df or held_format(ctx, node.dtype)):
            continue  # the default holds whatever this leaf holds: no pass over its values (the usual case)
        value = graph.tensors.get(node.name) if node.kind == CONSTANT else None
        if node.kind == INPUT and node.tags.get(SAMPLE_FILL):
            nonfinite = bool(node.tags.get(SAMPLE_NONFINITE))
        elif value is not None and holds_fill(value):
            nonfinite = not bool(torch.isfinite(value).all())
        else:
            continue
        df = held_format(ctx, node.dtype) if nonfinite else None
        if df or held_df:
            sources[node.name] = df or held_df
    for name, df in sources.items():
        graph[name].tags.setdefault("exact_df", df)
    ctx.notes["mask_fill_values"] = tag_downstream(graph, HOLDS_MASK_FILL, lambda node: node.name in sources,
                                                   lambda node: node.kind == OP and _passes_on(node.op_type))
    return graph


def _passes_on(op_type: str) -> bool:
    if op_type in PASS_ON:
        return True
    return registry.has(op_type) and registry.get(op_type).family == "tm"


def _per_datum_format(ctx: CompileContext) -> Optional[str]:
    """The format held values take in place of the block-format default: Float16_b for the B family, Float16 for
    the A family (whose saturation at 2**17 keeps a fill a fill); None when the default is not a block format."""
    from pybuda.dtypes import DataFormat as DF

    override = ctx.config.default_df_override
    if override is None:
        return None
    df = DF.from_json(override)
    if not df.is_bfp:
        return None
    return "Float16_b" if df.exponent_family == "b" else "Float16"
