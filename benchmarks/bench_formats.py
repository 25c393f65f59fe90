"""Throughput of ``pybuda.golden.formats.quantize`` (and packing) against plain torch in the same run.

The golden backend quantises every tensor edge, so ``quantize`` must keep up with memory-bound torch
ops. Target: Bfp8_b >= 100 M datums/s on the CI CPU. Reported per format: datums/s, and the ratio
to ``x.clone()`` and to a ``x.to(torch.bfloat16).float()`` round trip measured here, now.

    .venv/bin/python benchmarks/bench_formats.py [--datums 4194304] [--repeat 5] [--pack]
"""

from __future__ import annotations

import argparse
from typing import Callable, Dict

import torch

from timing import best_time, best_times

from pybuda.golden import formats, packing
from pybuda.golden.tiles import pad_to_tiles, tilize
from pybuda.dtypes import DataFormat

FORMATS = [DataFormat.Float16_b, DataFormat.Float16, DataFormat.Lf8, DataFormat.Bfp8_b, DataFormat.Bfp8,
           DataFormat.Bfp4_b, DataFormat.Bfp2_b, DataFormat.Int8]

# Activation and weight shapes of one BERT-base encoder layer at sequence length 128.
BERT_EDGES = [(128, 768)] * 8 + [(128, 3072)] * 2 + [(12, 128, 128)] * 3 + [(768, 768)] * 4 + \
             [(768, 3072), (3072, 768)]






def main() -> None:
    """Run the measurements and print one table (M datums/s, ratios to the torch baselines)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datums", type=int, default=1 << 22, help="datums in the big test tensor")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--pack", action="store_true", help="also time pack_tensor/unpack_tensor")
    args = ap.parse_args()

    torch.manual_seed(0)
    cols = 1024
    x = torch.randn(args.datums // cols, cols)
    n = x.numel()

    # One interleaved measurement for the baselines and every format.
    fns: Dict[str, Callable[[], object]] = {
        "clone": lambda: x.clone(),
        "bf16": lambda: x.to(torch.bfloat16).float(),
    }
    for df in FORMATS:
        fns[df.name] = (lambda d: (lambda: formats.quantize(x, d)))(df)
    edges = [torch.randn(s) for s in BERT_EDGES]
    n_edges = sum(e.numel() for e in edges)
    fns["edges"] = lambda: [formats.quantize(e, DataFormat.Bfp8_b) for e in edges]
    fns["edges_clone"] = lambda: [e.clone() for e in edges]
    fns["edges_bf16"] = lambda: [e.to(torch.bfloat16).float() for e in edges]
    best = best_times(fns, args.repeat)
    t_clone, t_bf16 = best["clone"], best["bf16"]
    print(f"torch threads: {torch.get_num_threads()}, tensor {tuple(x.shape)} = {n / 1e6:.1f} M datums")
    print(f"{'op':<28}{'M datums/s':>12}{'vs clone':>10}{'vs bf16 rt':>12}")
    print(f"{'x.clone()':<28}{n / t_clone / 1e6:>12.0f}{1.0:>10.2f}{t_bf16 / t_clone:>12.2f}")
    print(f"{'x.to(bfloat16).float()':<28}{n / t_bf16 / 1e6:>12.0f}{t_clone / t_bf16:>10.2f}{1.0:>12.2f}")

    for df in FORMATS:
        t = best[df.name]
        print(f"{'quantize ' + df.name:<28}{n / t / 1e6:>12.0f}{t_clone / t:>10.2f}{t_bf16 / t:>12.2f}")
    # The many-small-tensors case of the golden backend: one BERT-base layer's edges.
    t_edges, t_edges_clone, t_edges_bf16 = best["edges"], best["edges_clone"], best["edges_bf16"]
    print(f"{'Bfp8_b, BERT layer edges':<28}{n_edges / t_edges / 1e6:>12.0f}"
          f"{t_edges_clone / t_edges:>10.2f}{t_edges_bf16 / t_edges:>12.2f}"
          f"   ({len(edges)} tensors, {n_edges / 1e6:.1f} M datums)")

    if args.pack:
        tiles = tilize(pad_to_tiles(x[: max(1, (1 << 20) // cols)]))
        m = tiles.numel()
        for df in (DataFormat.Float16_b, DataFormat.Bfp8_b, DataFormat.Bfp4_b):
            tp = best_time(lambda: packing.pack_tensor(tiles, df), max(1, args.repeat // 2))
            data = packing.pack_tensor(tiles, df)
            tu = best_time(lambda: packing.unpack_tensor(data, df), max(1, args.repeat // 2))
            print(f"{'pack ' + df.name:<28}{m / tp / 1e6:>12.0f}{'':>10}{'':>12}   unpack {m / tu / 1e6:.0f} M/s")


if __name__ == "__main__":
    main()
