"""Time to first output: what a user waits from ``pybuda.run_inference`` to the first output (issue #16).

The user's path, in one process: a TTDevice (golden backend) holding a PyTorchModule with random weights,
one input pushed, ``pybuda.run_inference()`` until the first output is popped from the output queue. The
wait is broken down into

* capture       PyTorch -> ir.Graph (torch.export and the mapping onto the op registry)
* sample check  ``check_samples_independent``: torch run on two samples together and alone (microbatch >= 2)
* compile       ``compile_graph`` from INIT_COMPILE to GENERATE_NETLIST; netlist validation and the
                YAML text (``netlist.to_yaml``, written to the build folder) are shown inside it
* device setup  the golden device: weights into their queues (device layout, then quantised to the
                queue's format)
* first run     the simulated chip running the pushed input (golden numerics), to the popped output
* other         everything else (runtime bookkeeping, host-side input/output conversions)

and every figure is also given as a multiple of one eager PyTorch forward of the same model on the same
input, measured in the same run (best of ``--forward-repeat``, after a warm-up): the issue's goals are
first output <= 3x and compile <= 0.5x one forward. On a shared machine the ratio is the signal.

    .venv/bin/python benchmarks/bench_first_output.py [--model bert] [--variant large] [--seq-len 384]
        [--device gs_e150] [--microbatch 1] [--forward-repeat 3] [--threads N] [--second-run] [--profile] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import json
import os
import pstats
import sys
import time
from typing import Any, Callable, Dict, Iterator, List, Tuple

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import add_model_args, best_time, fresh_pybuda, model_from_args  # noqa: E402

#: (row, parent row or "", module, attribute path): the functions whose time makes up each row. A class
#: method is named "Class.method". Rows with a parent are part of it, not added to the total again.
PHASES: List[Tuple[str, str, str, str]] = [
    ("capture", "", "pybuda.compile", "module_to_graph"),
    ("sample check", "", "pybuda.runtime.backend_api", "check_samples_independent"),
    ("compile", "", "pybuda.runtime.backend_api", "_run_compiler"),
    ("validate netlist", "compile", "pybuda.netlist.validate", "check"),
    ("netlist YAML", "compile", "pybuda.netlist", "to_yaml"),
    ("device setup", "", "pybuda.runtime.backend_api", "create_executor"),
    ("weights to device layout", "device setup", "pybuda.netlist.host_io", "to_device_layout"),
    ("weights quantised", "device setup", "pybuda.golden.device", "GoldenDevice.write_ram"),
    ("first run", "", "pybuda.golden.executor", "GoldenExecutor.run"),
]


class PhaseTimer:
    """Wraps the functions of :data:`PHASES` for the duration of a ``with`` block and adds up their wall
    and CPU seconds per row. A row's function called inside another call of itself counts once, and a
    child row counts only while its parent is running (to_device_layout also converts pushed inputs)."""

    def __init__(self) -> None:
        self.wall: Dict[str, float] = {row: 0.0 for row, *_ in PHASES}
        self.cpu: Dict[str, float] = {row: 0.0 for row, *_ in PHASES}
        self._active: Dict[str, int] = {row: 0 for row, *_ in PHASES}
        #: False once the first output is out: later calls (a second run) are not counted
        self.counting = True

    def _wrap(self, row: str, parent: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            if not self.counting or self._active[row] or (parent and not self._active[parent]):
                return fn(*args, **kwargs)
            self._active[row] += 1
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.wall[row] += time.perf_counter() - t0
                self.cpu[row] += time.process_time() - c0
                self._active[row] -= 1
        return timed

    @contextlib.contextmanager
    def installed(self) -> Iterator["PhaseTimer"]:
        import importlib

        undo = []
        for row, parent, module_name, attr in PHASES:
            owner: Any = importlib.import_module(module_name)
            *path, name = attr.split(".")
            for part in path:
                owner = getattr(owner, part)
            original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
            setattr(owner, name, self._wrap(row, parent, getattr(owner, name)))
            undo.append((owner, name, original))
        try:
            yield self
        finally:
            for owner, name, original in reversed(undo):
                setattr(owner, name, original)


def first_output(spec: Any, device: str, microbatch: int, profile: bool,
                 second_run: bool) -> Tuple[float, float, PhaseTimer, Any, Any]:
    """Wall and CPU seconds of the user's path to the first output, the per-phase times, the profile, and
    (with ``second_run``) the wall seconds of a second input through the running pipeline."""
    import pybuda
    from pybuda.arch import get_device_descriptor

    inputs = [t.repeat(microbatch, *([1] * (t.dim() - 1))) if t.dim() else t for t in spec.example_inputs]
    arch = get_device_descriptor(device_config=device).arch
    timer = PhaseTimer()
    prof = cProfile.Profile() if profile else None
    gc.collect()
    with fresh_pybuda(device_config=device), timer.installed():
        tt = pybuda.TTDevice("tt0", arch=arch, devtype=pybuda.BackendType.Golden, module=spec.to_pybuda())
        tt.push_to_inputs(*inputs)
        if prof is not None:
            prof.enable()
        t0, c0 = time.perf_counter(), time.process_time()
        out = pybuda.run_inference().get()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        if prof is not None:
            prof.disable()
        if not out:
            raise RuntimeError("run_inference returned no output")
        timer.counting = False
        again = None
        if second_run:  # the same input again: what the first run did once (weights prepared) is not redone
            tt.push_to_inputs(*inputs)
            t0 = time.perf_counter()
            pybuda.run_inference().get()
            again = time.perf_counter() - t0
    return wall, cpu, timer, prof, again


def main() -> None:
    """Measure one PyTorch forward (best of N) and the first output through the public API; print both."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(ap)
    ap.add_argument("--microbatch", type=int, default=1, help="samples in the pushed input")
    ap.add_argument("--forward-repeat", type=int, default=3, help="PyTorch forwards timed; the best counts")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads for the forward and the pipeline alike (default: torch's); on a loaded "
                         "machine 1 keeps torch's worker threads from spinning against other processes")
    ap.add_argument("--second-run", action="store_true",
                    help="also time a second input through the running pipeline (after the measured path)")
    ap.add_argument("--profile", action="store_true", help="cProfile the path, print the top functions")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    spec = model_from_args(args)
    with torch.no_grad():
        forward_s = best_time(lambda: spec.module(*spec.example_inputs), max(1, args.forward_repeat))
    wall, cpu, timer, prof, again = first_output(spec, args.device, max(1, args.microbatch), args.profile,
                                                 args.second_run)

    rows = [(row, parent, timer.wall[row], timer.cpu[row]) for row, parent, *_ in PHASES]
    top = sum(w for _, parent, w, _ in rows if not parent)
    top_cpu = sum(c for _, parent, _, c in rows if not parent)
    rows.append(("other", "", max(0.0, wall - top), max(0.0, cpu - top_cpu)))
    report = {
        "model": spec.full_name, "device": args.device, "microbatch": args.microbatch,
        "torch_threads": torch.get_num_threads(), "torch_forward_seconds": round(forward_s, 3),
        "first_output_seconds": round(wall, 2), "first_output_cpu_seconds": round(cpu, 2),
        "first_output_over_forward": round(wall / forward_s, 2),
        "compile_over_forward": round(timer.wall["compile"] / forward_s, 2),
        "phases": {row: {"seconds": round(w, 3), "cpu_seconds": round(c, 3), "over_forward": round(w / forward_s, 3),
                         **({"part_of": parent} if parent else {})} for row, parent, w, c in rows},
        "second_run_seconds": round(again, 3) if again is not None else None,
    }
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(f"{spec.description}, device {args.device}, microbatch {args.microbatch}, "
              f"torch threads {torch.get_num_threads()}")
        print(f"one PyTorch forward (best of {args.forward_repeat}): {forward_s:.3f} s")
        print(f"time to first output (run_inference -> first output popped): {wall:.2f} s "
              f"= {wall / forward_s:.2f}x one forward (goal <= 3x); CPU {cpu:.2f} s")
        print(f"  {'phase':<30} {'wall s':>8} {'cpu s':>8} {'x forward':>10}")
        for row, parent, w, c in rows:
            label = ("  " + row) if parent else row
            print(f"  {label:<30} {w:8.3f} {c:8.3f} {w / forward_s:10.3f}")
        print(f"compile = {timer.wall['compile'] / forward_s:.2f}x one forward (goal <= 0.5x)")
        if again is not None:
            print(f"a second input through the running pipeline: {again:.2f} s = {again / forward_s:.2f}x one forward "
                  f"(the first run's extra {timer.wall['first run'] - again:.2f} s is one-time work)")
    if prof is not None:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()
