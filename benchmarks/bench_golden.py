"""Run time of the golden backend against PyTorch eager float32, measured in the same run.

Compiles BERT-base (sequence 128 by default) once per microbatch at the given data format and math
fidelity, then times, interleaved and best-of-N (the machine is shared: the minimum is the signal):

- ``torch``: the PyTorch module, eager, float32, ``torch.no_grad``;
- ``golden``: the netlist on the golden backend with the chip's numerics (formats + fidelity);
- ``fast``: the same netlist in fast mode (``golden_ignore_df_precision`` / ``PYBUDA_GOLDEN_FAST=1``:
  plain float32, TMs only).

Only execution is timed (push inputs, run the program, pop outputs, back to framework tensors), never
the compile.

Memory: each side runs in its own child process (so neither pollutes the other's high-water mark), which
reports its peak resident set size (``ru_maxrss``) after a warm-up run and ``--repeat`` timed-free runs:

- ``torch``: import pybuda, build the model (same builder, weights in memory), run it eagerly;
- ``golden``: import pybuda, load the compiled netlist, host-I/O record and tensors the parent saved
  (``executor_inputs``, written once with ``torch.save``; the compile itself is not in this process),
  build the executor, drop the loaded tensors (the device keeps its own queue copies), run it.

Both children import the same modules, so the ratio compares what each run holds on top of the same
baseline; "mem x" is golden's peak RSS over torch's.

Goals (issue #16): golden <= 1.2x torch at Bfp8_b / LoFi at microbatch 1 and 8, fast <= 1.0x, peak memory
of the golden run <= 1.5x PyTorch's. The same table for a CNN: ``--model resnet --variant resnet50`` (its
convolutions run as the lowering's im2col pickers and matmuls, so the golden moves each tap's copy of the
activation that the chip would).

    .venv/bin/python benchmarks/bench_golden.py [--microbatch 1 8] [--repeat 5] [--df Bfp8_b] [--fidelity LoFi]
                                                [--model bert --variant base --seq-len 128] [--threads N]
                                                [--profile [--profile-rows N]] [--no-memory]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import resource
import subprocess
import sys
import tempfile
import time
from typing import List, Sequence

import torch

from timing import best_times




def _size(args) -> dict:
    """The model's size argument: ``--seq-len`` for a text model (BERT: 128 unless given), none for an image model."""
    seq_len = args.seq_len if args.seq_len is not None else (128 if args.model == "bert" else None)
    return {"seq_len": seq_len} if seq_len else {}


def _compile(args, microbatch: int):
    from pybuda.config import CompilerConfig
    from pybuda.models import get_model
    from pybuda.compile import pybuda_compile
    from pybuda.dtypes import DataFormat, MathFidelity

    spec = get_model(args.model, args.variant, microbatch=microbatch, **_size(args))
    cfg = CompilerConfig(default_df_override=DataFormat.from_json(args.df),
                         default_math_fidelity=MathFidelity.from_json(args.fidelity),
                         device_config=args.device_config)
    results = pybuda_compile(spec.to_pybuda(), f"{spec.full_name}_mb{microbatch}", *spec.example_inputs,
                             compiler_cfg=cfg, microbatch_size=microbatch)
    return spec, results


def _peak_rss_mb() -> float:
    """This process's peak resident set size in MiB: ``VmHWM`` of /proc/self/status, the high-water mark of
    this program's own memory. ``ru_maxrss`` survives exec on Linux, so a child started by a parent that held
    2 GB would report the parent's peak (both sides then read the same number); it is the fallback elsewhere
    (Linux reports it in KiB)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _memory_child(args) -> int:
    """Run one side in this (child) process and print its peak RSS as JSON (see the module docstring)."""
    if args.memory_child == "torch":
        from pybuda.models import get_model

        spec = get_model(args.model, args.variant, microbatch=args.memory_microbatch, **_size(args))
        inputs = list(spec.example_inputs)
        with torch.no_grad():
            for _ in range(args.repeat + 1):
                spec.module(*inputs)
    else:
        from pybuda.golden.executor import GoldenExecutor

        saved = torch.load(args.memory_file, weights_only=False)
        executor = GoldenExecutor(*saved["executor_inputs"], fast=args.memory_child == "fast")
        inputs = saved["inputs"]
        del saved
        for _ in range(args.repeat + 1):
            executor.run(inputs)
    print(json.dumps({"peak_rss_mb": _peak_rss_mb()}))
    return 0


def _child_peak_mb(argv: Sequence[str], kind: str, microbatch: int, path: str) -> float:
    cmd = [sys.executable, os.path.abspath(__file__), *argv, "--memory-child", kind,
           "--memory-microbatch", str(microbatch), "--memory-file", path]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return float(json.loads(done.stdout.strip().splitlines()[-1])["peak_rss_mb"])


def _memory(argv: Sequence[str], results, inputs, microbatch: int) -> dict:
    """Peak RSS (MiB) of the torch and the golden run, each in its own child process."""
    from pybuda.golden.executor import executor_inputs

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "golden_run.pt")
        torch.save({"executor_inputs": executor_inputs(results), "inputs": inputs}, path)
        return {kind: _child_peak_mb(argv, kind, microbatch, path) for kind in ("torch", "golden")}


def main(argv: List[str] = None) -> int:
    """Measure and print one line per microbatch with the times and the ratios to torch."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="bert")
    ap.add_argument("--variant", default="base")
    ap.add_argument("--seq-len", type=int, default=None, help="text models only (BERT: default 128)")
    ap.add_argument("--microbatch", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--df", default="Bfp8_b")
    ap.add_argument("--fidelity", default="LoFi")
    ap.add_argument("--device-config", default="wh_n150")
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    ap.add_argument("--profile", action="store_true", help="print a cProfile of one golden run per microbatch")
    ap.add_argument("--profile-rows", type=int, default=15, help="functions the --profile listing shows")
    ap.add_argument("--no-memory", action="store_true", help="skip the peak-memory children")
    ap.add_argument("--memory-child", choices=("torch", "golden", "fast"), help=argparse.SUPPRESS)
    ap.add_argument("--memory-microbatch", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--memory-file", help=argparse.SUPPRESS)
    raw_argv = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(raw_argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.memory_child:
        return _memory_child(args)

    from pybuda.golden.executor import GoldenExecutor, executor_inputs
    from pybuda.verify import calculate_pcc

    size = "".join(f" seq {v}" for v in _size(args).values())
    print(f"golden backend vs PyTorch eager float32: {args.model} {args.variant}{size}, "
          f"{args.df} / {args.fidelity}, {torch.get_num_threads()} threads, best of {args.repeat}")
    print(f"{'mb':>3} {'torch s':>9} {'golden s':>9} {'fast s':>9} {'golden/torch':>13} {'fast/torch':>11} "
          f"{'PCC golden':>11} {'compile s':>10} {'torch MiB':>10} {'golden MiB':>11} {'mem x':>6}")
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
        if args.no_memory:
            mem = ""
        else:
            peak = _memory(raw_argv, results, inputs, mb)
            mem = f" {peak['torch']:>10.0f} {peak['golden']:>11.0f} {peak['golden'] / peak['torch']:>5.2f}x"
        print(f"{mb:>3} {best['torch']:>9.3f} {best['golden']:>9.3f} {best['fast']:>9.3f} "
              f"{best['golden'] / best['torch']:>12.2f}x {best['fast'] / best['torch']:>10.2f}x "
              f"{pcc:>11.5f} {compile_s:>10.1f}{mem}", flush=True)
        if args.profile:
            prof = cProfile.Profile()
            prof.runcall(precise.run, inputs)
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(args.profile_rows)
            print(out.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
