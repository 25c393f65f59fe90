"""Operand edges between op layouts: whether a producer's layout can feed an operand of a consumer's, and
the TMs the netlist then needs on the edge (undoing and redoing t-streaming, stacks that line up with the
consumer's blocks, the consumer's padding, a padded producer's unpad). Shared by the legalizer, the
policies, the placer's checks and netlist generation."""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

from pybuda.balancer.types import OpModel
from pybuda.netlist.device_ops import ops_of_class
from pybuda.netlist.tms import HStack, InputUnpad, Pad, TileShape3, TMError, VStack, as_tms, effective_order, \
    has_reshaping_tms

MATMUL_TYPES = ops_of_class("matmul", "depthwise")
#: Elementwise op types: their ublock pins a stacked input's block.
ELTWISE_TYPES = ops_of_class("binary", "copy", "sfpu")


def divisible_either_direction(a: int, b: int) -> bool:
    """True when ``a`` divides ``b`` or ``b`` divides ``a`` (net2pipe's rule for buffer/t and stacks)."""
    return a % b == 0 or b % a == 0


def stack_block(consumer_type: str, index: int, model: OpModel, horizontal: bool, bias: bool = False) -> Optional[int]:
    """The consumer block (tiles) along a stacked dimension of input ``index`` that the netlist pins,
    or None: matmul in0 u_kt (h) / ublock rows (v), in1 ublock cols (h) / u_kt (v), bias the ublock;
    eltwise, copy and SFPU ops their ublock (mirrors ``pybuda.netlist.validate.stack_factors``)."""
    if consumer_type == "matmul":
        if index == 0:
            return model.u_kt if horizontal else model.ublock[0]
        if index == 1:
            return model.ublock[1] if horizontal else model.u_kt
        if index == 2 and bias:
            return model.ublock[1] if horizontal else model.ublock[0]
        return None
    if consumer_type in ELTWISE_TYPES:
        return model.ublock[1] if horizontal else model.ublock[0]
    return None


def stacks_ok(shape: Tuple[int, int, int], tms: Sequence[Any], consumer_type: str, index: int, model: OpModel,
              bias: bool = False) -> bool:
    """Spec §2.3 "stack factors must divide the consumer grid and its mblock/ublock dimensions, in one
    direction or the other", as the netlist validator checks it: at every ``hstack``/``vstack`` of the
    edge, the stacked slice width and the consumer's block along that dimension divide one another.
    The TMs are walked in the order they take effect (pads last, :func:`pybuda.netlist.tms.effective_order`)."""
    shape = TileShape3(*shape)
    for tm in effective_order(tms):
        if isinstance(tm, (HStack, VStack)):
            horizontal = isinstance(tm, HStack)
            block = stack_block(consumer_type, index, model, horizontal, bias)
            width = shape.ct if horizontal else shape.rt
            if block and width and width % block and block % width:
                return False
        try:
            shape = tm.apply(shape)
        except TMError:
            return False
    return True


def operand_stream(consumer: OpModel, consumer_type: str, input_index: int) -> Tuple[int, int]:
    """The t-stream factors (fr, fc) the consumer's operand ``input_index`` must arrive with: the
    consumer's own for eltwise-like ops; for matmuls input 0 follows row streaming and input 1 column
    streaming (the other direction is a z-broadcast of the operand)."""
    fr, fc = consumer.t_stream_factor
    if consumer_type in MATMUL_TYPES:
        if input_index == 0:
            return (fr, 1)
        if input_index == 1:
            return (1, fc)
    return (fr, fc)


def stream_compatible(producer: Optional[OpModel], consumer: OpModel, consumer_type: str, input_index: int,
                      edge_tms: Sequence[Any] = (), consumer_bias: bool = False) -> bool:
    """Whether the netlist can connect ``producer`` to operand ``input_index`` of ``consumer``.

    A producer without t-streaming always connects (the consumer's slices are TMs on the edge; stacks
    among the edge's own TMs are checked by the legalizer). A streamed producer connects directly when
    the operand expects the same streaming and the edge has no reshaping TMs; otherwise its slices are
    stacked back first (:func:`stream_edge_tms`) and every stack on the edge must line up with the
    consumer's block (:func:`stacks_ok`, spec §2.3)."""
    if producer is None or producer.stream_factor == 1:
        return True
    tms = stream_edge_tms(producer, consumer, consumer_type, input_index, edge_tms)
    shape = (producer.t, producer.out_rt, producer.out_ct)
    return stacks_ok(shape, tms, consumer_type, input_index, consumer, consumer_bias)


def stream_edge_tms(producer: Optional[OpModel], consumer: OpModel, consumer_type: str, input_index: int,
                    edge_tms: Sequence[Any] = ()) -> List[Any]:
    """The TM list the netlist needs on the edge into operand ``input_index`` of ``consumer``: undo the
    producer's t-streaming (``vstack``/``hstack``), the edge's own TMs, then the consumer's streaming
    (``vslice``/``hslice``; a z-``broadcast`` for the non-streamed matmul operand). When producer and
    operand stream the same way and the edge has no reshaping TMs nothing is needed. ``producer`` is
    None for queues (parameters, inputs), which hold the unstreamed tensor."""
    tms = list(edge_tms or ())
    p = producer.t_stream_factor if producer is not None else (1, 1)
    o = operand_stream(consumer, consumer_type, input_index)
    if p == o and not has_reshaping_tms(tms) and p != (1, 1):
        return tms
    out: List[Any] = []
    if p[0] > 1:
        out.append({"vstack": p[0]})
    elif p[1] > 1:
        out.append({"hstack": p[1]})
    out += tms
    if o[0] > 1:
        out.append({"vslice": o[0]})
    elif o[1] > 1:
        out.append({"hslice": o[1]})
    cfr, cfc = consumer.t_stream_factor
    if consumer_type in MATMUL_TYPES and input_index in (0, 1) and consumer.stream_factor > 1 and o == (1, 1):
        out.append({"broadcast": {"z": cfr * cfc}})
    return _pad_operand(out, consumer, input_index)


def _pad_operand(tms: List[Any], consumer: OpModel, input_index: int) -> List[Any]:
    """``tms`` with the consumer's padding of operand ``input_index`` (OpModel.input_padding) added: one
    ``pad`` TM per edge (the netlist allows one), merged into a pad the edge already has."""
    pads = consumer.input_padding
    pr, pc = pads[input_index] if input_index < len(pads) else (0, 0)
    if not (pr or pc):
        return tms
    out: List[Any] = []
    value = 0.0
    for tm in as_tms(tms):
        if isinstance(tm, Pad):
            pr, pc, value = pr + tm.rt, pc + tm.ct, tm.value
        else:
            out.append(tm)
    return out + [Pad(pr, pc, value)]


def edge_unpad(producer: Optional[OpModel]) -> Optional[InputUnpad]:
    """The ``input_N_unpad`` a reader of ``producer`` needs (its padding, OpModel.padding), or None."""
    if producer is None or not producer.padded:
        return None
    return InputUnpad(rt=producer.padding[0], ct=producer.padding[1])
