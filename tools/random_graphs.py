"""Random-graph test of the PyTorch path: any model that runs in torch must run on the device, run
partly on the CPU (with a fallback report), or fail with a PybudaError naming an op -- never give a
wrong number without an error, never crash.

Each seed builds a small ``torch.nn.Module`` (3-12 common ops, odd shapes, batch 1 or 2; data movement
includes attention head splits/merges of any head size, window partitions, flatten/unflatten, stack, repeat
and expand; ``--classic`` leaves those out and gives the first generator's seeds, ``--batch-mix`` adds ops
that mix the samples of a batch) as Python source, runs it as a ``pybuda.PyTorchModule`` on a golden Wormhole B0 ``TTDevice`` at Float32 and compares the
result with torch eager. Outcomes:

    PASS       ran on the device, matches torch
    FALLBACK   ran with CPU fallback stages, matches torch (host share of ops from the report)
    ERROR      a clean ``pybuda.errors.PybudaError``
    WRONG      no error, but the numbers, shapes or dtypes differ from torch
    CRASH      an exception that is not a PybudaError
    NUMERICS   differs from torch with the chip's arithmetic (Float32 storage, HiFi4 products, the SFPU's
               approximations) but matches exactly when the golden backend computes in plain float32
               (``golden_ignore_df_precision``): the compiled program is right and the model is sensitive
               (a comparison near its threshold, a layer norm of nearly constant rows ...); or the plain
               float32 run differs only at elements where torch's own result is unstable (a comparison of
               tied operands decided the other way, or a one-ulp input change, moves them:
               :func:`unstable_elements`), as for ``ne(mean(softmax(x)), 0.25)``
    HANG       the seed ran past its time limit (seeds run in worker processes, killed on timeout)

Usage::

    python tools/random_graphs.py --seeds 0-499 --jobs 2     # the table of outcomes
    python tools/random_graphs.py --seed 17 -v              # one seed: module source, outcome, error
    python tools/random_graphs.py --seeds 0-499 --classic    # the first generator's seeds
    python tools/random_graphs.py --seeds 0-499 --arch grayskull     # a card that accumulates in Float16_b
    python tools/random_graphs.py --seeds 0-499 --defaults --arch grayskull   # the chip's default formats
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import random
import select
import subprocess
import sys
import textwrap
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# Named tolerances: Float32 storage with HiFi4 products (TF32-like multiplier inputs), a few ops deep.
PCC_MIN = 0.99
#: The PCC check applies to outputs whose standard deviation exceeds this fraction of their largest magnitude.
PCC_MIN_SPREAD = 1e-4
ATOL_REL = 0.02  # |got - want| <= ATOL_REL * max|want| + RTOL * |want| + ATOL_ABS
#: An absolute floor: an output that torch cancels to exactly zero (x - mean(x) of equal values) is a float32
#: rounding away from zero in any other correct evaluation order.
ATOL_ABS = 1e-6
RTOL = 0.02
SEED_TIMEOUT_S = 120.0
#: The card the seeds run on: one with Float32 arithmetic, so "at Float32" means what it says.
DEFAULT_ARCH = "wormhole_b0"
#: ``--defaults`` (the chip's default data formats and fidelity, Float16_b storage) compares at this looser
#: tolerance and PCC (its NUMERICS rerun still computes in plain float32).
DEFAULTS_ATOL_REL, DEFAULTS_PCC = 0.08, 0.97

OUTCOMES = ("PASS", "FALLBACK", "NUMERICS", "ERROR", "WRONG", "CRASH", "HANG")
BAD = ("WRONG", "CRASH", "HANG")


# --- the generator ----------------------------------------------------------------------------------
Shape = Tuple[int, ...]


def _dim(rng: random.Random, lo: int = 3, hi: int = 40) -> int:
    """A size, mostly not a multiple of 32."""
    if rng.random() < 0.1:
        return rng.choice([32, 64])
    while True:
        d = rng.randint(lo, hi)
        if d % 32:
            return d


@dataclass
class Value:
    name: str
    shape: Shape


@dataclass
class Model:
    """Python source of one random module, plus its input shapes."""

    seed: int
    init: List[str] = field(default_factory=list)
    body: List[str] = field(default_factory=list)
    inputs: List[Value] = field(default_factory=list)
    outputs: List[str] = field(default_factory=list)
    ops: List[str] = field(default_factory=list)

    def source(self) -> str:
        args = ", ".join(v.name for v in self.inputs)
        init = "\n".join(f"        {line}" for line in self.init) or "        pass"
        body = "\n".join(f"        {line}" for line in self.body)
        outs = ", ".join(self.outputs)
        return (f"class RandomGraph{self.seed}(nn.Module):\n"
                f"    def __init__(self):\n        super().__init__()\n{init}\n\n"
                f"    def forward(self, {args}):\n{body}\n        return {outs}\n")

    def input_shapes(self) -> List[Shape]:
        return [v.shape for v in self.inputs]


class Gen:
    def __init__(self, seed: int, classic: bool = False, batch_mix: bool = False):
        self.classic = classic
        self.ops = self.OPS + ([] if classic else self.MOVEMENT_OPS) + (self.BATCH_MIX_OPS if batch_mix else [])
        self.rng = random.Random(seed)
        self.m = Model(seed)
        self.values: List[Value] = []
        self.count = 0
        self.batch = self.rng.choice([1, 1, 2])

    def new(self, expr: str, shape: Shape, op: str) -> Value:
        name = f"v{self.count}"
        self.count += 1
        self.m.body.append(f"{name} = {expr}  # {op} -> {list(shape)}")
        self.m.ops.append(op)
        v = Value(name, tuple(shape))
        self.values.append(v)
        return v

    def attr(self, line: str) -> str:
        name = f"m{len(self.m.init)}"
        self.m.init.append(f"self.{name} = {line}")
        return f"self.{name}"

    def pick(self, pred=lambda v: True) -> Optional[Value]:
        cands = [v for v in self.values if pred(v)]
        if not cands:
            return None
        # favour recent values: graphs become chains with some branches
        return cands[-1] if self.rng.random() < 0.6 else self.rng.choice(cands)

    # each op returns a Value or None (not applicable)
    def op_linear(self):
        x = self.pick()
        n = _dim(self.rng, 4, 48)
        lin = self.attr(f"nn.Linear({x.shape[-1]}, {n}, bias={self.rng.random() < 0.7})")
        return self.new(f"{lin}({x.name})", x.shape[:-1] + (n,), "linear")

    def op_conv2d(self):
        x = self.pick(lambda v: len(v.shape) == 4)
        if x is None:
            return None
        c, h, w = x.shape[1:]
        k = self.rng.choice([1, 3, 3, 5])
        s = self.rng.choice([1, 1, 2])
        p = self.rng.choice([0, k // 2])
        ho, wo = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
        if ho < 1 or wo < 1:
            return None
        co = _dim(self.rng, 3, 24)
        groups = c if (self.rng.random() < 0.15 and co % c == 0) else 1
        conv = self.attr(f"nn.Conv2d({c}, {co}, {k}, stride={s}, padding={p}, groups={groups})")
        return self.new(f"{conv}({x.name})", (x.shape[0], co, ho, wo), "conv2d")

    def op_batchnorm(self):
        x = self.pick(lambda v: len(v.shape) == 4)
        if x is None:
            return None
        bn = self.attr(f"_bn(nn.BatchNorm2d({x.shape[1]}))")
        return self.new(f"{bn}({x.name})", x.shape, "batch_norm")

    def op_layernorm(self):
        x = self.pick()
        ln = self.attr(f"_ln(nn.LayerNorm({x.shape[-1]}))")
        return self.new(f"{ln}({x.name})", x.shape, "layer_norm")

    def op_softmax(self):
        x = self.pick()
        d = self.rng.randrange(1, len(x.shape)) if len(x.shape) > 1 else 0
        fn = self.rng.choice(["softmax", "log_softmax"])
        return self.new(f"torch.{fn}({x.name}, dim={d})", x.shape, fn)

    def op_reduce(self):
        x = self.pick(lambda v: len(v.shape) >= 2)
        if x is None:
            return None
        d = self.rng.randrange(1, len(x.shape))
        keep = self.rng.random() < 0.5
        kind = self.rng.choice(["sum", "mean", "max", "amax"])
        shape = list(x.shape)
        if keep:
            shape[d] = 1
        else:
            shape.pop(d)
        if kind == "max":
            expr = f"torch.max({x.name}, dim={d}, keepdim={keep})[0]"
        else:
            expr = f"{x.name}.{kind}(dim={d}, keepdim={keep})"
        return self.new(expr, tuple(shape), f"reduce_{kind}")

    def op_reshape(self):
        x = self.pick(lambda v: len(v.shape) >= 2)
        if x is None:
            return None
        shape = list(x.shape)
        if len(shape) >= 3 and self.rng.random() < 0.5:  # merge two trailing dims
            i = self.rng.randrange(1, len(shape) - 1)
            new = shape[:i] + [shape[i] * shape[i + 1]] + shape[i + 2:]
        else:  # split a dim with a small factor
            i = self.rng.randrange(1, len(shape))
            f = next((f for f in (2, 3, 5, 7) if shape[i] % f == 0 and shape[i] > f), None)
            if f is None or len(shape) >= 5:
                return None
            new = shape[:i] + [f, shape[i] // f] + shape[i + 1:]
        fn = self.rng.choice(["reshape", "view"])
        src = x.name if fn == "reshape" else f"{x.name}.contiguous()"
        dims = ", ".join([f"{x.name}.shape[0]"] + [str(d) for d in new[1:]])  # batch-size independent
        return self.new(f"{src}.{fn}({dims})", tuple(new), fn)

    def op_permute(self):
        x = self.pick(lambda v: len(v.shape) >= 3)
        if x is None:
            return None
        r = len(x.shape)
        if self.rng.random() < 0.5:
            a, b = self.rng.sample(range(1, r), 2)
            shape = list(x.shape)
            shape[a], shape[b] = shape[b], shape[a]
            return self.new(f"{x.name}.transpose({a}, {b})", tuple(shape), "transpose")
        perm = [0] + self.rng.sample(range(1, r), r - 1)
        return self.new(f"{x.name}.permute({tuple(perm)})", tuple(x.shape[p] for p in perm), "permute")

    def op_slice(self):
        x = self.pick(lambda v: len(v.shape) >= 2 and max(v.shape[1:]) >= 3)
        if x is None:
            return None
        dims = [d for d in range(1, len(x.shape)) if x.shape[d] >= 3]
        d = self.rng.choice(dims)
        n = x.shape[d]
        start = self.rng.randrange(0, n - 1)
        stop = self.rng.randrange(start + 1, n + 1)
        step = self.rng.choice([1, 1, 2, 3])
        size = len(range(start, stop, step))
        idx = ", ".join([":"] * d + [f"{start}:{stop}:{step}"])
        shape = list(x.shape)
        shape[d] = size
        return self.new(f"{x.name}[{idx}]", tuple(shape), "slice")

    def op_cat(self):
        x = self.pick()
        same = [v for v in self.values if v.shape == x.shape and v is not x]
        y = self.rng.choice(same) if same and self.rng.random() < 0.7 else None
        d = self.rng.randrange(1, len(x.shape)) if len(x.shape) > 1 else 0
        other = y.name if y is not None else f"torch.tanh({x.name})"
        shape = list(x.shape)
        shape[d] *= 2
        return self.new(f"torch.cat([{x.name}, {other}], dim={d})", tuple(shape), "cat")

    def op_pad(self):
        x = self.pick(lambda v: len(v.shape) >= 2)
        if x is None:
            return None
        mode = self.rng.choice(["constant", "constant", "reflect", "replicate"])
        r = len(x.shape)
        if mode != "constant" and r not in (3, 4):
            mode = "constant"
        ndims = 1 if mode != "constant" and r == 3 else self.rng.choice([1, 2]) if r >= 3 else 1
        if mode != "constant" and r == 4:
            ndims = 2
        pads = []
        shape = list(x.shape)
        for i in range(ndims):
            d = r - 1 - i
            hi = shape[d] - 1 if mode == "reflect" else 3
            lo_p, hi_p = self.rng.randint(0, min(3, hi)), self.rng.randint(0, min(3, hi))
            pads += [lo_p, hi_p]
            shape[d] += lo_p + hi_p
        val = f", value={self.rng.choice([0.0, 1.5, -2.0])}" if mode == "constant" else ""
        return self.new(f"F.pad({x.name}, {tuple(pads)}, mode='{mode}'{val})", tuple(shape), f"pad_{mode}")

    def op_pool(self):
        x = self.pick(lambda v: len(v.shape) == 4 and min(v.shape[2:]) >= 2)
        if x is None:
            return None
        k = self.rng.choice([2, 3])
        s = self.rng.choice([1, 2])
        if min(x.shape[2:]) < k:
            return None
        kind = self.rng.choice(["max_pool2d", "avg_pool2d", "adaptive_avg_pool2d"])
        if kind == "adaptive_avg_pool2d":
            return self.new(f"F.adaptive_avg_pool2d({x.name}, 1)", x.shape[:2] + (1, 1), kind)
        h, w = ((n - k) // s + 1 for n in x.shape[2:])
        return self.new(f"F.{kind}({x.name}, {k}, stride={s})", x.shape[:2] + (h, w), kind)

    def op_interpolate(self):
        x = self.pick(lambda v: len(v.shape) == 4 and max(v.shape[2:]) <= 24)
        if x is None:
            return None
        mode = self.rng.choice(["nearest", "bilinear"])
        ac = ", align_corners=False" if mode == "bilinear" else ""
        return self.new(f"F.interpolate({x.name}, scale_factor=2, mode='{mode}'{ac})",
                        x.shape[:2] + (x.shape[2] * 2, x.shape[3] * 2), f"interpolate_{mode}")

    def op_where(self):
        x = self.pick()
        same = [v for v in self.values if v.shape == x.shape and v is not x]
        y = self.rng.choice(same).name if same else "0.5"
        cmp = self.rng.choice([">", "<", ">=", "<=", "==", "!="])
        c = 0.0 if cmp not in ("==", "!=") else 0.0
        return self.new(f"torch.where({x.name} {cmp} {c}, {x.name}, {y})", x.shape, f"where{cmp}")

    def op_masked_fill(self):
        x = self.pick()
        v = self.rng.choice(["-1e4", "0.0", "2.0"])
        return self.new(f"{x.name}.masked_fill({x.name} < 0.1, {v})", x.shape, "masked_fill")

    def op_compare(self):
        x = self.pick()
        same = [v for v in self.values if v.shape == x.shape and v is not x]
        y = self.rng.choice(same).name if same else "0.25"
        cmp = self.rng.choice(["gt", "lt", "ge", "le", "eq", "ne"])
        return self.new(f"torch.{cmp}({x.name}, {y}).to(torch.float32)", x.shape, f"compare_{cmp}")

    def op_sdpa(self):
        x = self.pick(lambda v: len(v.shape) in (3, 4))
        if x is None:
            return None
        s, d = x.shape[-2], x.shape[-1]
        kind = self.rng.choice(["none", "causal", "bool_mask", "float_mask"])
        kw = ""
        if kind == "causal":
            kw = ", is_causal=True"
        elif kind == "bool_mask":
            mask = self.attr(f"_buffer(torch.rand({s}, {s}) > 0.3)")
            self.m.init.append(f"{mask}[:, 0] = True")
            kw = f", attn_mask={mask}"
        elif kind == "float_mask":
            mask = self.attr(f"_buffer(torch.randn({s}, {s}))")
            kw = f", attn_mask={mask}"
        lin = self.attr(f"nn.Linear({d}, {d})")
        return self.new(f"F.scaled_dot_product_attention({x.name}, {lin}({x.name}), {x.name}{kw})", x.shape,
                        f"sdpa_{kind}")

    def op_unary(self):
        x = self.pick()
        fn = self.rng.choice(["torch.relu({})", "F.gelu({})", "torch.tanh({})", "torch.sigmoid({})",
                              "torch.exp(torch.clamp({}, max=4.0))", "torch.abs({})", "torch.sqrt(torch.abs({}) + 1)",
                              "torch.log(torch.abs({}) + 1)", "torch.reciprocal(torch.abs({}) + 1)", "-{}",
                              "{} * {}", "F.silu({})", "torch.clamp({}, -0.5, 0.5)", "F.leaky_relu({}, 0.1)",
                              "torch.rsqrt(torch.abs({}) + 1)", "torch.pow({}, 2)"])
        name = fn.split("(")[0].replace("torch.", "").replace("F.", "") or "neg"
        return self.new(fn.format(x.name, x.name), x.shape, f"unary_{name.strip() or 'mul_self'}")

    def op_binary(self):
        x = self.pick()
        opname, sym = self.rng.choice([("add", "+"), ("sub", "-"), ("mul", "*"), ("div", "/"),
                                       ("maximum", None), ("minimum", None)])
        r = self.rng.random()
        same = [v for v in self.values if v.shape == x.shape and v is not x]
        if r < 0.35 and same:
            y, shape = self.rng.choice(same).name, x.shape
        elif r < 0.7:
            # a parameter broadcast against x: some dims kept, others 1, maybe fewer dims
            rank = self.rng.randint(1, len(x.shape))
            pshape = tuple(d if self.rng.random() < 0.6 else 1 for d in x.shape[len(x.shape) - rank:])
            if len(pshape) == len(x.shape):
                pshape = (1,) + pshape[1:]
            y = self.attr(f"nn.Parameter(torch.randn{pshape} * 0.5 + {1.5 if opname == 'div' else 0.0})")
            shape = x.shape
        else:
            # a reduction of x with keepdim, broadcast back
            d = self.rng.randrange(len(x.shape)) if self.rng.random() < 0.2 else len(x.shape) - 1
            if d == 0:
                d = len(x.shape) - 1
            y, shape = f"{x.name}.mean(dim={d}, keepdim=True)", x.shape
        if opname == "div":
            y = f"(torch.abs({y}) + 1)"
        expr = f"({x.name} {sym} {y})" if sym else f"torch.{opname}({x.name}, {y})"
        return self.new(expr, shape, f"binary_{opname}")

    def op_heads(self):
        """Attention-style head split (reshape + transpose) or merge, with any head size."""
        x = self.pick(lambda v: len(v.shape) == 3)
        if x is None:
            return None
        b, s, d = x.shape
        if self.rng.random() < 0.5:
            h = next((f for f in self.rng.sample([2, 3, 4, 5, 6], 5) if d % f == 0 and d > f), None)
            if h is None:
                return None
            return self.new(f"{x.name}.reshape({x.name}.shape[0], {s}, {h}, {d // h}).transpose(1, 2)",
                            (b, h, s, d // h), "heads_split")
        y = self.pick(lambda v: len(v.shape) == 4)
        if y is None:
            return None
        b, h, s, d = y.shape
        return self.new(f"{y.name}.transpose(1, 2).reshape({y.name}.shape[0], {s}, {h * d})", (b, s, h * d),
                        "heads_merge")

    def op_windows(self):
        """Swin-style window partition of a 4-D value: split two dims, swap the inner parts, merge."""
        x = self.pick(lambda v: len(v.shape) == 4)
        if x is None:
            return None
        b, h, w, c = x.shape
        fh = next((f for f in (2, 3, 5) if h % f == 0 and h > f), None)
        fw = next((f for f in (2, 3, 5) if w % f == 0 and w > f), None)
        if fh is None or fw is None:
            return None
        nh, nw = h // fh, w // fw
        return self.new(f"{x.name}.reshape({x.name}.shape[0], {nh}, {fh}, {nw}, {fw}, {c}).permute(0, 1, 3, 2, 4, 5)"
                        f".reshape({x.name}.shape[0], {nh * nw}, {fh * fw}, {c})", (b, nh * nw, fh * fw, c), "windows")

    def op_flatten(self):
        x = self.pick(lambda v: len(v.shape) >= 3)
        if x is None:
            return None
        r = len(x.shape)
        start = self.rng.randrange(1, r - 1)
        end = self.rng.randrange(start + 1, r)
        shape = x.shape[:start] + (_numel(x.shape[start:end + 1]),) + x.shape[end + 1:]
        return self.new(f"{x.name}.flatten({start}, {end})", shape, "flatten")

    def op_unflatten(self):
        x = self.pick(lambda v: 2 <= len(v.shape) <= 4)
        if x is None:
            return None
        d = self.rng.randrange(1, len(x.shape))
        f = next((f for f in self.rng.sample([2, 3, 4, 5, 7], 5) if x.shape[d] % f == 0 and x.shape[d] > f), None)
        if f is None:
            return None
        shape = x.shape[:d] + (f, x.shape[d] // f) + x.shape[d + 1:]
        return self.new(f"{x.name}.unflatten({d}, ({f}, {x.shape[d] // f}))", shape, "unflatten")

    def op_stack(self):
        x = self.pick(lambda v: len(v.shape) <= 4)
        if x is None:
            return None
        same = [v for v in self.values if v.shape == x.shape and v is not x]
        other = self.rng.choice(same).name if same else f"torch.sigmoid({x.name})"
        d = self.rng.randrange(1, len(x.shape) + 1)
        shape = x.shape[:d] + (2,) + x.shape[d:]
        return self.new(f"torch.stack([{x.name}, {other}], dim={d})", shape, "stack")

    def op_repeat(self):
        x = self.pick(lambda v: len(v.shape) >= 2)
        if x is None:
            return None
        factors = [1] + [self.rng.choice([1, 1, 2, 3]) for _ in x.shape[1:]]
        if all(f == 1 for f in factors):
            factors[-1] = 2
        shape = tuple(d * f for d, f in zip(x.shape, factors))
        return self.new(f"{x.name}.repeat({', '.join(map(str, factors))})", shape, "repeat")

    def op_expand(self):
        x = self.pick(lambda v: len(v.shape) >= 2)
        if x is None:
            return None
        d = self.rng.randrange(1, len(x.shape))
        n = self.rng.choice([2, 3, 5, 7])
        shape = x.shape[:d] + (n,) + x.shape[d + 1:]
        sizes = ", ".join("-1" if i != d else str(n) for i in range(len(x.shape)))
        return self.new(f"{x.name}.mean(dim={d}, keepdim=True).expand({sizes})", shape, "expand")

    def op_batch_mix(self):
        """Ops that mix the samples of a batch: a concat over dim 0 or a reshape that folds dim 0."""
        x = self.pick(lambda v: len(v.shape) >= 2)
        if x is None:
            return None
        if self.rng.random() < 0.5:
            return self.new(f"torch.cat([{x.name}, torch.tanh({x.name})], dim=0)", (2 * x.shape[0],) + x.shape[1:],
                            "batch_cat")
        return self.new(f"{x.name}.reshape(1, -1, {x.shape[-1]})",
                        (1, _numel(x.shape[:-1]), x.shape[-1]), "batch_fold")

    OPS = ["linear", "conv2d", "batchnorm", "layernorm", "softmax", "reduce", "reshape", "permute", "slice",
           "cat", "pad", "pool", "interpolate", "where", "masked_fill", "compare", "sdpa", "unary", "binary"]
    #: Data movement beyond the first generator's reshape/permute/slice/cat/pad (issue #12); ``--classic``
    #: generates without them (the seeds of the first generator).
    MOVEMENT_OPS = ["heads", "windows", "flatten", "unflatten", "stack", "repeat", "expand"]
    #: Ops that mix the samples of a batch, only with ``--batch-mix``: the runtime traces a device module for
    #: one sample, so today they give per-sample results (WRONG) instead of running on the host.
    BATCH_MIX_OPS = ["batch_mix"]

    def build(self) -> Model:
        rng = self.rng
        rank = rng.choice([2, 3, 3, 4, 4])
        shape = (self.batch,) + tuple(_dim(rng, 3, 24 if rank == 4 else 40) for _ in range(rank - 1))
        x = Value("x", shape)
        self.m.inputs.append(x)
        self.values.append(x)
        if rng.random() < 0.25:
            y = Value("y", shape)
            self.m.inputs.append(y)
            self.values.append(y)
        n = rng.randint(3, 12)
        guard = 0
        while len(self.m.ops) < n and guard < 200:
            guard += 1
            op = rng.choice(self.ops)
            v = getattr(self, f"op_{op}")()
            if v is not None and (max(v.shape) > 2048 or _numel(v.shape) > 200_000):
                # keep graphs small: undo a too-large value
                self.values.pop()
                self.m.body.pop()
                self.m.ops.pop()
        last = self.values[-1]
        if last.name in ("x", "y"):
            last = self.new(f"torch.relu({last.name})", last.shape, "unary_relu")
        self.m.outputs = [last.name]
        if rng.random() < 0.2:
            others = [v for v in self.values if v.name not in ("x", "y") and v is not last]
            if others:
                self.m.outputs.append(rng.choice(others).name)
        return self.m


def _numel(shape: Shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def generate(seed: int, classic: Optional[bool] = None, batch_mix: Optional[bool] = None) -> Model:
    """The random model of ``seed`` (deterministic); ``classic``: without :attr:`Gen.MOVEMENT_OPS`;
    ``batch_mix``: with :attr:`Gen.BATCH_MIX_OPS` (defaults: the ``RANDOM_GRAPHS_CLASSIC`` and
    ``RANDOM_GRAPHS_BATCH_MIX`` environment variables, which ``--classic`` / ``--batch-mix`` set for the
    workers)."""
    if classic is None:
        classic = os.environ.get("RANDOM_GRAPHS_CLASSIC") == "1"
    if batch_mix is None:
        batch_mix = os.environ.get("RANDOM_GRAPHS_BATCH_MIX") == "1"
    return Gen(seed, classic, batch_mix).build()


PRELUDE = '''
import torch
from torch import nn
import torch.nn.functional as F


def _bn(m):
    """A BatchNorm with non-trivial running statistics and affine parameters."""
    with torch.no_grad():
        m.running_mean.uniform_(-0.5, 0.5)
        m.running_var.uniform_(0.5, 2.0)
        m.weight.uniform_(0.5, 1.5)
        m.bias.uniform_(-0.5, 0.5)
    return m


def _ln(m):
    with torch.no_grad():
        m.weight.uniform_(0.5, 1.5)
        m.bias.uniform_(-0.5, 0.5)
    return m


def _buffer(t):
    return nn.Buffer(t) if hasattr(nn, "Buffer") else t
'''


def instantiate(model: Model):
    """``(module, inputs)`` for ``model``: the module in eval mode with seeded weights and inputs."""
    import torch

    ns: Dict[str, object] = {}
    exec(compile(PRELUDE + "\n" + model.source(), f"<random_graph_{model.seed}>", "exec"), ns)
    torch.manual_seed(model.seed)
    module = ns[f"RandomGraph{model.seed}"]().eval()
    g = torch.Generator().manual_seed(model.seed + 1_000_003)
    inputs = [torch.randn(*v.shape, generator=g) for v in model.inputs]
    return module, inputs


# --- running and classifying ------------------------------------------------------------------------
@dataclass
class Outcome:
    seed: int
    outcome: str
    detail: str = ""
    host_fraction: float = 0.0
    seconds: float = 0.0
    ops: List[str] = field(default_factory=list)


def compare(got: Sequence, want: Sequence, ignore: Optional[Sequence] = None) -> Optional[str]:
    """None when ``got`` matches ``want`` (count, shapes, dtypes, PCC and allclose), else what differs.
    ``ignore``: per output, a bool mask of elements left out of the comparison (see :func:`unstable_elements`)."""
    import torch

    from pybuda.verify import calculate_pcc

    if len(got) != len(want):
        return f"{len(got)} outputs, expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        g = g.value() if hasattr(g, "value") and not isinstance(g, torch.Tensor) else g
        if not isinstance(g, torch.Tensor):
            return f"output {i} is a {type(g).__name__}, not a tensor"
        if tuple(g.shape) != tuple(w.shape):
            return f"output {i}: shape {list(g.shape)}, expected {list(w.shape)}"
        if w.is_floating_point() != g.is_floating_point():
            return f"output {i}: dtype {g.dtype}, expected {w.dtype}"
        g, w = g.detach().double(), w.detach().double()
        finite = w[torch.isfinite(w)]
        scale = float(finite.abs().max()) if finite.numel() else 0.0  # of the whole output, ignored elements too
        if ignore is not None and ignore[i] is not None:
            keep = ~ignore[i]
            g, w = g[keep], w[keep]
        if torch.isnan(g).any() != torch.isnan(w).any() or bool((torch.isnan(g) != torch.isnan(w)).any()):
            return f"output {i}: NaNs differ"
        fin = torch.isfinite(w)
        if not torch.equal(torch.isfinite(g), fin) or not torch.equal(g[~fin & ~torch.isnan(w)],
                                                                        w[~fin & ~torch.isnan(w)]):
            return f"output {i}: infinities differ"
        g, w = g[fin], w[fin]
        if w.numel() == 0:
            continue
        err = (g - w).abs()
        if bool((err > _bound(w, scale)).any()):
            return (f"output {i}: max abs diff {float(err.max()):.4g} > {ATOL_REL} * max|want| "
                    f"({scale:.4g}) + {RTOL} * |want| + {ATOL_ABS}")
        # PCC says something only where the output varies by more than float32 rounding noise over a few ops
        # (a near-constant output, -1e4 everywhere up to rounding, has a PCC of noise against noise), and only
        # over the whole output: the elements left after ignoring unstable ones may be nearly alike.
        ignored = ignore is not None and ignore[i] is not None and bool(ignore[i].any())
        if not ignored and w.numel() > 1 and float(w.std()) > PCC_MIN_SPREAD * max(scale, 1e-30):
            pcc = calculate_pcc(g, w)
            if pcc < PCC_MIN:
                return f"output {i}: PCC {pcc:.5f} < {PCC_MIN}"
    return None


def _bound(want, scale: float):
    """The largest difference :func:`compare` allows from each element of ``want``, an output whose largest
    finite magnitude is ``scale``."""
    return ATOL_REL * scale + RTOL * want.abs() + ATOL_ABS


#: Perturbed reruns of the torch reference that find its unstable elements (:func:`unstable_elements`).
NUDGE_TRIALS = 4


def _beyond_tolerance(a, b):
    """Elementwise: ``a`` differs from the reference ``b`` by more than :func:`compare` allows (or in NaN-ness)."""
    import torch

    a, b = a.detach().double(), b.detach().double()
    nan = torch.isnan(a) != torch.isnan(b)
    finite = torch.isfinite(b)
    scale = float(b[finite].abs().max()) if bool(finite.any()) else 0.0
    far = (a - b).abs() > _bound(b, scale)
    return nan | (far & finite & torch.isfinite(a)) | (torch.isfinite(a) != finite)


#: Relative distance under which a comparison's operands count as tied (a few float32 ulps), and the
#: absolute one for operands near zero (a cancellation that left 1e-8 where the math has 0).
TIE_RTOL, TIE_ATOL = 2.0 ** -19, 1e-6
_COMPARES = ("gt", "lt", "ge", "le", "eq", "ne")


@contextlib.contextmanager
def _ties_resolved(side: int):
    """torch's comparisons (functions and operators) with tied float operands treated as equal (``side``
    0) or the left one as just above (1) or below (-1) the right one."""
    import torch

    def resolving(fn):
        def compare_op(a, b, *args, **kwargs):
            if isinstance(a, torch.Tensor) and a.is_floating_point() and not args and not kwargs:
                wide_b = b.double() if isinstance(b, torch.Tensor) else torch.tensor(float(b), dtype=torch.float64)
                gap = (a.double() - wide_b).abs()
                # .le, not <= or torch.le, which are the patched ones
                tie = gap.le(TIE_RTOL * torch.maximum(a.double().abs(), wide_b.abs()) + TIE_ATOL)
                if bool(tie.any()):
                    nudge = torch.maximum(wide_b.abs() * 2.0 ** -10, torch.tensor(1e-5, dtype=torch.float64))
                    a = torch.where(tie, wide_b + side * nudge, a.double()).to(a.dtype)
            return fn(a, b, *args, **kwargs)
        return compare_op

    saved = {}
    for name in _COMPARES:
        for owner, attr in ((torch, name), (torch.Tensor, f"__{name}__")):
            saved[(owner, attr)] = getattr(owner, attr)
            setattr(owner, attr, resolving(saved[(owner, attr)]))
    try:
        yield
    finally:
        for (owner, attr), fn in saved.items():
            setattr(owner, attr, fn)


def unstable_elements(module, inputs, want, trials: int = NUDGE_TRIALS):
    """Per output, the elements of torch's own result that move beyond tolerance when a comparison of tied
    operands is decided the other way (:func:`_ties_resolved`), or when the float inputs move by one ulp
    (each datum up, down or not at all, ``trials`` times, every other time evaluated in float64): a
    comparison or rounding of a value that sits on its threshold (the mean of a softmax against 0.25, say).
    Any two correct float32 evaluations may disagree there, so such elements say nothing about the compiled
    program."""
    import torch

    gen = torch.Generator().manual_seed(0)
    masks = [torch.zeros(w.shape, dtype=torch.bool) if isinstance(w, torch.Tensor) else None for w in want]

    def nudge(t):
        if not t.is_floating_point():
            return t.clone()
        step = torch.randint(-1, 2, t.shape, generator=gen)
        up, down = torch.nextafter(t, torch.full_like(t, float("inf"))), torch.nextafter(t, torch.full_like(t, float("-inf")))
        return torch.where(step > 0, up, torch.where(step < 0, down, t))

    def mark(out) -> None:  # the elements of this rerun's outputs that moved
        out = list(out) if isinstance(out, tuple) else [out]
        for i, (o, w) in enumerate(zip(out, want)):
            if masks[i] is not None and isinstance(o, torch.Tensor) and o.shape == w.shape:
                masks[i] |= _beyond_tolerance(o, w) if w.is_floating_point() else o != w

    # Ties first: each comparison whose operands are tied, decided both ways.
    for side in (0, 1, -1):
        with torch.no_grad(), _ties_resolved(side):
            mark(module(*[t.clone() for t in inputs]))
    wide = copy.deepcopy(module).double()
    for trial in range(trials):
        moved = [nudge(t) for t in inputs]
        with torch.no_grad():
            out = None
            if trial % 2:  # every other trial in float64 (another rounding of the same math), where the model allows
                try:
                    out = wide(*[t.double() if t.is_floating_point() else t for t in moved])
                except RuntimeError:
                    out = None
            if out is None:
                out = module(*moved)
        mark(out)
    return masks


def run_on_device(module, inputs, exact: bool = False):
    """Run ``module`` on a fresh golden TTDevice at Float32; returns ``(outputs, fallback report)``.
    ``exact``: the golden backend computes in plain float32 instead of the chip's arithmetic."""
    import torch

    import pybuda
    from pybuda.arch.types import BackendType
    from pybuda.dtypes import DataFormat, MathFidelity

    pybuda.pybuda_reset()
    pybuda.set_configuration_options(golden_ignore_df_precision=exact)
    if not os.environ.get("RANDOM_GRAPHS_DEFAULTS"):  # --defaults: the chip's own formats and fidelity
        pybuda.set_configuration_options(default_df_override=DataFormat.Float32,
                                         default_math_fidelity=MathFidelity.HiFi4)
    # Float32 arithmetic needs a card that has it: Wormhole B0 by default (--arch); Grayskull's accumulator
    # holds Float16_b at most, so "Float32" there is Float32 storage with bfloat16 sums.
    arch = os.environ.get("RANDOM_GRAPHS_ARCH", DEFAULT_ARCH)
    tt = pybuda.TTDevice("tt0", devtype=BackendType.Golden, arch=pybuda.BackendDevice.from_string(arch))
    ptm = pybuda.PyTorchModule("random_graph", module)
    tt.place_module(ptm)
    tt.push_to_inputs(*[t.clone() for t in inputs])
    try:
        q = pybuda.run_inference(_sequential=True)
        out = q.get(timeout=SEED_TIMEOUT_S)
    finally:
        pybuda.shutdown()
    report = None
    try:
        from pybuda.frontend.torch import capture

        # The capture the runtime made: one PyTorch module on a TTDevice is captured for the whole push
        # (runtime/stages._translate_tt), so its CPU stages are decided on the whole batch, not one sample.
        report = capture(module, tuple(inputs), for_device=True).report
    except Exception:  # the report is informational only
        pass
    out = [o.value() if hasattr(o, "value") and not isinstance(o, torch.Tensor) else o for o in out]
    return out, report


def classify(model: Model, runner=None) -> Outcome:
    """Run ``model`` and say which outcome it has. ``runner(module, inputs) -> (outputs, report)``
    replaces :func:`run_on_device` (tests use it to check that the classifier catches wrong results)."""
    import torch

    from pybuda.errors import PybudaError

    runner = runner or run_on_device
    t0 = time.perf_counter()
    module, inputs = instantiate(model)
    with torch.no_grad():
        want = module(*[t.clone() for t in inputs])
    want = list(want) if isinstance(want, tuple) else [want]
    res = Outcome(model.seed, "PASS", ops=list(model.ops))
    try:
        got, report = runner(module, inputs)
    except PybudaError as e:
        res.outcome, res.detail = "ERROR", f"{type(e).__name__}: {e}"
    except Exception as e:  # noqa: BLE001 -- that is the point: anything else is a crash
        res.outcome = "CRASH"
        res.detail = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=-6)}"
    else:
        diff = compare(got, want)
        if diff is not None and runner is run_on_device:
            exact_got = None
            try:
                exact_got = run_on_device(module, inputs, exact=True)[0]
                exact_diff = compare(exact_got, want)
            except Exception as e:  # noqa: BLE001
                exact_diff = f"the exact-float32 rerun failed: {type(e).__name__}: {e}"
            if exact_diff is not None and exact_got is not None:
                # Differences confined to elements where torch's own result is unstable (ties) are numerics too.
                ignore = unstable_elements(module, inputs, want)
                ignored = sum(int(m.sum()) for m in ignore if m is not None)
                if ignored and compare(exact_got, want, ignore) is None:
                    exact_diff = None
                    total = sum(m.numel() for m in ignore if m is not None)
                    diff += (f" (float32 differs only at elements where torch's own result is unstable: a comparison "
                             f"of tied operands or a one-ulp input change moves them; {ignored} of {total})")
            if exact_diff is None:
                res.outcome, res.detail = "NUMERICS", diff
                diff = None
            else:
                diff = f"{exact_diff} (with the chip's arithmetic: {diff})"
        if res.outcome == "NUMERICS":
            pass
        elif diff is not None:
            res.outcome, res.detail = "WRONG", diff
        elif report is not None and report.has_fallback:
            res.outcome, res.host_fraction = "FALLBACK", report.host_fraction
            res.detail = ", ".join(report.op_names())
    res.seconds = time.perf_counter() - t0
    return res


# --- workers with a watchdog ------------------------------------------------------------------------
def _worker_main() -> None:
    """Read seeds (one per line) from stdin, write one JSON outcome per line to stdout."""
    import logging

    logging.disable(logging.WARNING)
    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # stray prints must not corrupt the protocol
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        seed = int(line)
        try:
            res = classify(generate(seed))
        except Exception as e:  # noqa: BLE001 -- the harness itself failed on this seed
            res = Outcome(seed, "CRASH", f"harness: {type(e).__name__}: {e}")
        real_stdout.write(json.dumps(asdict(res)) + "\n")
        real_stdout.flush()


class Worker:
    def __init__(self):
        self.proc = None
        self.start()

    def start(self):
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1,
                                     cwd=ROOT)

    def run(self, seed: int, timeout: float) -> Outcome:
        try:
            self.proc.stdin.write(f"{seed}\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self.restart()
            return Outcome(seed, "CRASH", "worker process died")
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            self.restart()
            return Outcome(seed, "HANG", f"no result after {timeout:.0f} s")
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            self.start()
            return Outcome(seed, "CRASH", f"worker process died (exit code {code})")
        return Outcome(**json.loads(line))

    def restart(self):
        self.proc.kill()
        self.proc.wait()
        self.start()

    def close(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except Exception:
            self.proc.kill()


def run_seeds(seeds: Sequence[int], jobs: int, timeout: float, progress: bool = True) -> List[Outcome]:
    todo = list(seeds)
    results: List[Outcome] = []
    lock = threading.Lock()

    def loop():
        w = Worker()
        try:
            while True:
                with lock:
                    if not todo:
                        return
                    seed = todo.pop(0)
                r = w.run(seed, timeout)
                with lock:
                    results.append(r)
                    if progress:
                        print(f"  seed {r.seed:4d}: {r.outcome:8s} {r.seconds:5.1f}s "
                              f"{r.detail.splitlines()[0][:100] if r.detail else ''}", file=sys.stderr, flush=True)
        finally:
            w.close()

    threads = [threading.Thread(target=loop) for _ in range(max(1, jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(results, key=lambda r: r.seed)


def table(results: Sequence[Outcome]) -> str:
    counts = {k: 0 for k in OUTCOMES}
    for r in results:
        counts[r.outcome] += 1
    lines = [f"{len(results)} seeds", f"{'outcome':10s} count"]
    lines += [f"{k:10s} {counts[k]:5d}" for k in OUTCOMES]
    fb = [r.host_fraction for r in results if r.outcome == "FALLBACK"]
    if fb:
        lines.append(f"(fallback host share of ops: mean {sum(fb) / len(fb):.0%}, max {max(fb):.0%})")
    for kind in ("WRONG", "CRASH", "HANG", "ERROR"):
        bad = [r for r in results if r.outcome == kind]
        if bad:
            lines.append(f"\n{kind}:")
            for r in bad:
                first = r.detail.splitlines()[0][:140] if r.detail else ""
                lines.append(f"  python tools/random_graphs.py --seed {r.seed} -v   # {first}")
    return "\n".join(lines)


def parse_seeds(text: str) -> List[int]:
    out: List[int] = []
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-")
            out += list(range(int(a), int(b) + 1))
        elif part:
            out.append(int(part))
    return out


def _use_defaults_tolerance() -> None:
    """Compare at the ``--defaults`` tolerance from now on."""
    global ATOL_REL, PCC_MIN
    ATOL_REL, PCC_MIN = DEFAULTS_ATOL_REL, DEFAULTS_PCC


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", help="seed ranges, e.g. 0-499 or 1,5,9-12")
    p.add_argument("--seed", type=int, help="run one seed in this process")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--timeout", type=float, default=SEED_TIMEOUT_S, help="seconds per seed before HANG")
    p.add_argument("-v", "--verbose", action="store_true")
    p.add_argument("--json", help="write the outcomes to this file")
    p.add_argument("--classic", action="store_true", help="the first generator's ops only (no stack, repeat, "
                   "expand, flatten, head/window moves, batch mixing)")
    p.add_argument("--batch-mix", action="store_true", help="also ops that mix the samples of a batch (a concat "
                   "over dim 0, a reshape folding dim 0)")
    # No argparse default: a worker (started without --arch) keeps the arch its parent put in the environment.
    p.add_argument("--arch", default=None, help="the simulated card's arch (grayskull, wormhole_b0, "
                   f"blackhole); default {DEFAULT_ARCH}, which computes in Float32 (Grayskull accumulates in "
                   "Float16_b even at Float32)")
    p.add_argument("--defaults", action="store_true", help="the chip's default data formats and fidelity, not "
                   f"Float32/HiFi4, compared at {DEFAULTS_ATOL_REL} * max|want| and PCC {DEFAULTS_PCC}")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.arch:
        from pybuda.arch.types import BackendDevice
        from pybuda.errors import ConfigError

        try:
            BackendDevice.from_string(a.arch)  # a misspelt arch fails here, not in every worker
        except ConfigError as e:
            p.error(str(e))
        os.environ["RANDOM_GRAPHS_ARCH"] = a.arch
    if a.classic:
        os.environ["RANDOM_GRAPHS_CLASSIC"] = "1"  # inherited by the worker processes
    if a.batch_mix:
        os.environ["RANDOM_GRAPHS_BATCH_MIX"] = "1"
    if a.defaults:
        os.environ["RANDOM_GRAPHS_DEFAULTS"] = "1"
    if os.environ.get("RANDOM_GRAPHS_DEFAULTS"):  # here or inherited by a worker
        _use_defaults_tolerance()
    if a.worker:
        _worker_main()
        return 0
    if a.seed is not None:
        model = generate(a.seed)
        if a.verbose:
            print(f"# seed {a.seed}: inputs {[list(s) for s in model.input_shapes()]}; ops {model.ops}")
            print(model.source())
        else:
            import logging
            logging.disable(logging.WARNING)
        res = classify(model)
        print(f"seed {a.seed}: {res.outcome}"
              + (f" (host share {res.host_fraction:.0%})" if res.outcome == "FALLBACK" else "")
              + f" in {res.seconds:.1f}s")
        if res.detail:
            print(textwrap.indent(res.detail, "  "))
        return 1 if res.outcome in BAD else 0
    if not a.seeds:
        p.error("give --seeds or --seed")
    t0 = time.time()
    results = run_seeds(parse_seeds(a.seeds), a.jobs, a.timeout)
    print(table(results))
    print(f"\n({time.time() - t0:.0f} s)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump([asdict(r) for r in results], f, indent=1)
    return 1 if any(r.outcome in BAD for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
