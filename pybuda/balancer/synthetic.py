"""Hand-built lowered graphs for balancer/placer tests and benchmarks.

:func:`bert_encoder_graph` builds the lowered form of a BERT encoder (attention with per-head TMs,
softmax and layernorm decomposed into eltwise/matmul/reduce ops, GELU feed-forward) directly as a
:class:`~pybuda.ir.lowered.BudaGraph`, so the balancer and placer can be exercised at BERT-Large
scale without the front end. :func:`chain_graph` builds small chains for unit tests.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from pybuda.ir.lowered import BudaGraph, BudaOp, BudaQueue, TileShape
from pybuda.dtypes import DataFormat, MathFidelity


class _Builder:
    def __init__(self, name: str, microbatch: int, act_df: DataFormat, weight_df: DataFormat,
                 fidelity: MathFidelity):
        self.g = BudaGraph(name=name, microbatch=microbatch)
        self.act_df = act_df
        self.weight_df = weight_df
        self.fidelity = fidelity

    def queue(self, name: str, kind: str, shape: Sequence[int], df: Optional[DataFormat] = None,
              producer: Optional[str] = None) -> str:
        z, rt, ct = shape
        self.g.add_queue(BudaQueue(name=name, kind=kind, shape=TileShape(1, z, rt, ct),
                                   df=df or (self.weight_df if kind in ("parameter", "constant") else self.act_df),
                                   producer=producer))
        if kind == "input":
            self.g.input_order.append(name)
        if kind == "output":
            self.g.output_order.append(name)
        return name

    def op(self, name: str, type_: str, inputs: List[str], shape: Sequence[int], *,
           tms: Optional[Dict[int, list]] = None, attrs: Optional[dict] = None,
           out_df: Optional[DataFormat] = None) -> str:
        z, rt, ct = shape
        in_df = [self.g.df_of(i) for i in inputs]
        self.g.add_op(BudaOp(name=name, type=type_, inputs=list(inputs), shape=TileShape(1, z, rt, ct),
                             attrs=dict(attrs or {}), input_tms=dict(tms or {}), in_df=in_df,
                             out_df=out_df or self.act_df, intermed_df=self.act_df if not self.act_df.is_bfp else
                             DataFormat.Float16_b, acc_df=DataFormat.Float16_b, math_fidelity=self.fidelity))
        return name


def bert_encoder_graph(layers: int = 24, seq_tiles: int = 12, hidden_tiles: int = 32, heads: int = 16,
                       ff_mult: int = 4, microbatch: int = 64, act_df: DataFormat = DataFormat.Bfp8_b,
                       weight_df: DataFormat = DataFormat.Bfp8_b, fidelity: MathFidelity = MathFidelity.LoFi,
                       separate_bias: bool = True) -> BudaGraph:
    """A lowered BERT encoder: ``layers`` layers of hidden ``hidden_tiles·32``, sequence
    ``seq_tiles·32``. BERT-Large seq 384 is the default (24 layers, 12×32 tiles, 16 heads); with
    ``separate_bias`` biases are their own ``add`` ops (≈43 ops per layer)."""
    b = _Builder(f"bert_{layers}l", microbatch, act_df, weight_df, fidelity)
    S, H, F = seq_tiles, hidden_tiles, hidden_tiles * ff_mult
    hd = H // heads if H % heads == 0 else 1
    x = b.queue("input_hidden", "input", (1, S, H))
    mask = b.queue("attention_mask", "input", (1, 1, S))
    ones_h = b.queue("const_ones_h", "constant", (1, H, 1))
    ones_s = b.queue("const_ones_s", "constant", (1, S, 1))
    scale = b.queue("const_scale", "constant", (1, 1, 1))
    eps = b.queue("const_eps", "constant", (1, 1, 1))
    f16 = DataFormat.Float16_b

    def linear(prefix: str, inp: str, k: int, n: int) -> str:
        w = b.queue(f"{prefix}.weight", "parameter", (1, k, n))
        bias = b.queue(f"{prefix}.bias", "parameter", (1, 1, n))
        if separate_bias:
            mm = b.op(f"{prefix}.mm", "matmul", [inp, w], (1, S, n))
            return b.op(f"{prefix}.bias_add", "add", [mm, bias], (1, S, n), tms={1: [{"broadcast": {"r": S}}]},
                        out_df=f16)
        return b.op(f"{prefix}.mm", "matmul", [inp, w, bias], (1, S, n), tms={2: [{"broadcast": {"r": S}}]},
                    attrs={"bias": True})

    def layernorm(prefix: str, inp: str) -> str:
        gamma = b.queue(f"{prefix}.gamma", "parameter", (1, 1, H))
        beta = b.queue(f"{prefix}.beta", "parameter", (1, 1, H))
        mean = b.op(f"{prefix}.mean", "matmul", [inp, ones_h], (1, S, 1))
        sub = b.op(f"{prefix}.sub", "subtract", [inp, mean], (1, S, H), tms={1: [{"broadcast": {"c": H}}]}, out_df=f16)
        sq = b.op(f"{prefix}.sq", "multiply", [sub, sub], (1, S, H))
        var = b.op(f"{prefix}.var", "matmul", [sq, ones_h], (1, S, 1))
        var_eps = b.op(f"{prefix}.var_eps", "add", [var, eps], (1, S, 1), tms={1: [{"broadcast": {"r": S}}]},
                       out_df=f16)
        std = b.op(f"{prefix}.std", "sqrt", [var_eps], (1, S, 1))
        rstd = b.op(f"{prefix}.rstd", "reciprocal", [std], (1, S, 1), out_df=f16)
        norm = b.op(f"{prefix}.norm", "multiply", [sub, rstd], (1, S, H), tms={1: [{"broadcast": {"c": H}}]})
        g = b.op(f"{prefix}.gamma_mul", "multiply", [norm, gamma], (1, S, H), tms={1: [{"broadcast": {"r": S}}]})
        return b.op(f"{prefix}.beta_add", "add", [g, beta], (1, S, H), tms={1: [{"broadcast": {"r": S}}]},
                    out_df=f16)

    h = x
    for layer in range(layers):
        p = f"l{layer}"
        q = linear(f"{p}.q", h, H, H)
        k = linear(f"{p}.k", h, H, H)
        v = linear(f"{p}.v", h, H, H)
        scores = b.op(f"{p}.scores", "matmul", [q, k], (heads, S, S),
                      tms={0: [{"hslice": heads}], 1: [{"hslice": heads}, "transpose"]})
        scaled = b.op(f"{p}.scale", "multiply", [scores, scale], (heads, S, S),
                      tms={1: [{"broadcast": {"z": heads}}, {"broadcast": {"r": S}}, {"broadcast": {"c": S}}]})
        masked = b.op(f"{p}.mask", "add", [scaled, mask], (heads, S, S),
                      tms={1: [{"broadcast": {"z": heads}}, {"broadcast": {"r": S}}]}, out_df=f16)
        ex = b.op(f"{p}.exp", "exp", [masked], (heads, S, S))
        ssum = b.op(f"{p}.sum", "matmul", [ex, ones_s], (heads, S, 1), tms={1: [{"broadcast": {"z": heads}}]})
        rsum = b.op(f"{p}.recip", "reciprocal", [ssum], (heads, S, 1), out_df=f16)
        probs = b.op(f"{p}.probs", "multiply", [ex, rsum], (heads, S, S), tms={1: [{"broadcast": {"c": S}}]})
        ctx = b.op(f"{p}.ctx", "matmul", [probs, v], (heads, S, hd), tms={1: [{"hslice": heads}]})
        merged = b.op(f"{p}.merge", "nop", [ctx], (1, S, H), tms={0: [{"hstack": heads}]})
        o = linear(f"{p}.o", merged, H, H)
        res1 = b.op(f"{p}.res1", "add", [o, h], (1, S, H), out_df=f16)
        ln1 = layernorm(f"{p}.ln1", res1)
        ff1 = linear(f"{p}.ff1", ln1, H, F)
        gelu = b.op(f"{p}.gelu", "gelu", [ff1], (1, S, F))
        ff2 = linear(f"{p}.ff2", gelu, F, H)
        res2 = b.op(f"{p}.res2", "add", [ff2, ln1], (1, S, H), out_df=f16)
        h = layernorm(f"{p}.ln2", res2)
    out = b.op("output_nop", "nop", [h], (1, S, H), out_df=f16)
    b.g.ops[out].untilize_output = True
    b.queue("output", "output", (1, S, H), df=f16, producer=out)
    return b.g


def chain_graph(shapes: Sequence[Sequence[int]], types: Optional[Sequence[str]] = None, *, microbatch: int = 1,
                df: DataFormat = DataFormat.Float16_b, with_output: bool = True) -> BudaGraph:
    """A chain ``input → op0 → op1 → … (→ output)``; op i has output shape ``shapes[i]`` = (z, rt, ct)
    and type ``types[i]`` (default ``nop``; ``matmul`` ops get a weight parameter of the right shape)."""
    b = _Builder("chain", microbatch, df, df, MathFidelity.HiFi3)
    z0, rt0, ct0 = shapes[0]
    types = list(types) if types else ["nop"] * len(shapes)
    prev = b.queue("in0", "input", (z0, rt0, ct0))
    prev_shape = (z0, rt0, ct0)
    for i, (shape, type_) in enumerate(zip(shapes, types)):
        if type_ == "matmul":
            w = b.queue(f"w{i}", "parameter", (shape[0], prev_shape[2], shape[2]))
            prev = b.op(f"op{i}", "matmul", [prev, w], shape)
        else:
            prev = b.op(f"op{i}", type_, [prev], shape)
        prev_shape = tuple(shape)
    if with_output:
        b.queue("out0", "output", prev_shape, producer=prev)
    return b.g
