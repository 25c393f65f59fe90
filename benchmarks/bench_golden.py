"""Run time of the golden backend against PyTorch eager float32, measured in the same run.

Compiles BERT-base (sequence 128 by default) once per microbatch at the given data format and math
fidelity, then times, interleaved and best-of-N (the machine is shared: the minimum is the signal):

- ``torch``: the PyTorch module, eager, float32, ``torch.no_grad``;
- ``golden``: the netlist on the golden backend with the chip's numerics (formats + fidelity);
- ``fast``: the same netlist in fast mode (``golden_ignore_df_precision`` / ``PYBUDA_GOLDEN_FAST=1``:
  plain float32, TMs only).

Only execution is timed (push inputs, run the program, pop outputs, back to framework tensors), never
the compile. Goals: golden <= 2x torch at Bfp8_b / LoFi, fast <= 1.2x.

    .venv/bin/python benchmarks/bench_golden.py [--microbatch 1 8] [--repeat 5] [--df Bfp8_b] [--fidelity LoFi]
                                                [--model bert --variant base --seq-len 128] [--threads N]
                                                [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time
from typing import List

import torch

from timing import best_times




def _compile(args, microbatch: int):
    from pybuda.config import CompilerConfig
    from pybuda.models import get_model
    from pybuda.compile import pybuda_compile
    from pybuda.dtypes import DataFormat, MathFidelity

    size = {"seq_len": args.seq_len} if args.seq_len else {}
    spec = get_model(args.model, args.variant, microbatch=microbatch, **size)
    cfg = CompilerConfig(default_df_override=DataFormat.from_json(args.df),
                         default_math_fidelity=MathFidelity.from_json(args.fidelity),
                         device_config=args.device_config)
    results = pybuda_compile(spec.to_pybuda(), f"{spec.full_name}_mb{microbatch}", *spec.example_inputs,
                             compiler_cfg=cfg, microbatch_size=microbatch)
    return spec, results


def main(argv: List[str] = None) -> int:
    """Measure and print one line per microbatch with the times and the ratios to torch."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="bert")
    ap.add_argument("--variant", default="base")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--microbatch", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--df", default="Bfp8_b")
    ap.add_argument("--fidelity", default="LoFi")
    ap.add_argument("--device-config", default="wh_n150")
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    ap.add_argument("--profile", action="store_true", help="print a cProfile of one golden run per microbatch")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    from pybuda.golden.executor import GoldenExecutor, executor_inputs
    from pybuda.verify import calculate_pcc

    print(f"golden backend vs PyTorch eager float32: {args.model} {args.variant} seq {args.seq_len}, "
          f"{args.df} / {args.fidelity}, {torch.get_num_threads()} threads, best of {args.repeat}")
    print(f"{'mb':>3} {'torch s':>9} {'golden s':>9} {'fast s':>9} {'golden/torch':>13} {'fast/torch':>11} "
          f"{'PCC golden':>11} {'compile s':>10}")
    for mb in args.microbatch:
        t0 = time.perf_counter()
        spec, results = _compile(args, mb)
        compile_s = time.perf_counter() - t0
        inputs = list(spec.example_inputs)
        precise = GoldenExecutor(*executor_inputs(results), fast=False)
        fast = GoldenExecutor(*executor_inputs(results), fast=True)
        with torch.no_grad():
            reference = spec.module(*inputs)
        reference = reference[0] if isinstance(reference, (tuple, list)) else reference
        pcc = calculate_pcc(reference, precise.run(inputs)[0])

        def run_torch():
            with torch.no_grad():
                return spec.module(*inputs)

        best = best_times({"torch": run_torch, "golden": lambda: precise.run(inputs),
                           "fast": lambda: fast.run(inputs)}, args.repeat)
        print(f"{mb:>3} {best['torch']:>9.3f} {best['golden']:>9.3f} {best['fast']:>9.3f} "
              f"{best['golden'] / best['torch']:>12.2f}x {best['fast'] / best['torch']:>10.2f}x "
              f"{pcc:>11.5f} {compile_s:>10.1f}", flush=True)
        if args.profile:
            prof = cProfile.Profile()
            prof.runcall(precise.run, inputs)
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(15)
            print(out.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
