"""Soak: many compile-and-run cycles in one process, and what they leave behind.

Each cycle builds a small PyBuda model (matmul + bias + relu), places it on a new TTDevice, runs one
input with ``run_inference``, reads the output, calls ``shutdown`` and ``pybuda_reset`` (so the next
cycle compiles again). 200 cycles run in sequential mode (the default with the simulated chip), then
50 in concurrent mode (``PYBUDA_FORCE_CONCURRENT=1``: one spawned device process per cycle, or a thread
with ``--concurrent-mode threads``). Before, after the first (warm-up) cycle, and after the last, it
prints the resident memory, thread count (Python threads and OS threads), open file descriptors
(``/proc/self/fd``) and child processes. A leak shows as growth from "warm" to "after"; there are no
assertions and no timing goals (seconds per cycle are printed for scale).

    .venv/bin/python benchmarks/bench_soak.py [--sequential 200] [--concurrent 50]
        [--concurrent-mode processes|threads] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing
import os
import threading
import time
from typing import Dict, List

import torch

import pybuda
import pybuda.op


def _proc_status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1


def _child_pids() -> List[int]:
    # Every process whose parent is this one (device processes, the multiprocessing resource tracker),
    # whether or not multiprocessing still tracks it.
    pids: List[int] = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                pids.extend(int(p) for p in f.read().split())
        except OSError:
            pass
    return sorted(set(pids))


def snapshot() -> Dict[str, float]:
    """Resources held by this process now (after a garbage collection).

    A multiprocessing queue's feeder thread ends shortly after its queue is closed; waiting (at most
    2 s) for those keeps a thread that is about to end from reading as a leak."""
    gc.collect()
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline and any(t.name == "QueueFeederThread" for t in threading.enumerate()):
        time.sleep(0.01)
    return {
        "rss_mb": round(_proc_status("VmRSS") / 1024.0, 1),
        "py_threads": threading.active_count(),
        "os_threads": _proc_status("Threads"),
        "open_fds": len(os.listdir("/proc/self/fd")),
        "children": len(_child_pids()),
        "mp_children": len(multiprocessing.active_children()),
    }


class Dense(pybuda.PyBudaModule):
    """The cycle's model: relu(x @ w + b), 32 wide (at module level: spawned device processes import it)."""

    def __init__(self, name: str):
        super().__init__(name)
        self.w = pybuda.Parameter(torch.randn(32, 32) / 6, requires_grad=False)
        self.b = pybuda.Parameter(torch.randn(1, 32), requires_grad=False)

    def forward(self, x):
        return pybuda.op.Relu("relu", pybuda.op.Add("add", pybuda.op.Matmul("mm", x, self.w), self.b))


def cycle(i: int) -> None:
    """One compile-and-run cycle (a fresh module each time, so each cycle compiles)."""
    pybuda.TTDevice("tt0", module=Dense(f"dense{i}"))
    x = torch.randn(1, 32)
    out = pybuda.run_inference(inputs=[x]).get(timeout=120)
    assert tuple(out[0].shape) == (1, 32)
    pybuda.shutdown()
    pybuda.pybuda_reset()


def phase(name: str, cycles: int) -> Dict[str, object]:
    """Run ``cycles`` cycles; resources before, after the first cycle, and after the last."""
    before = snapshot()
    t0 = time.perf_counter()
    cycle(0)
    first_s = time.perf_counter() - t0
    warm = snapshot()
    t0 = time.perf_counter()
    for i in range(1, cycles):
        cycle(i)
    rest_s = time.perf_counter() - t0
    after = snapshot()
    return {"phase": name, "cycles": cycles, "before": before, "warm": warm, "after": after,
            "first_cycle_s": round(first_s, 2),
            "s_per_cycle": round(rest_s / max(1, cycles - 1), 3)}


def _print(result: Dict[str, object]) -> None:
    print(f"\n{result['phase']}: {result['cycles']} cycles, first {result['first_cycle_s']} s, then "
          f"{result['s_per_cycle']} s/cycle")
    keys = list(result["before"])
    print(f"  {'':8s}" + "".join(f"{k:>12s}" for k in keys))
    for row in ("before", "warm", "after"):
        print(f"  {row:8s}" + "".join(f"{result[row][k]:>12}" for k in keys))
    growth = {k: round(result["after"][k] - result["warm"][k], 1) for k in keys}
    print(f"  {'growth':8s}" + "".join(f"{growth[k]:>12}" for k in keys) + "   (after - warm)")
    print("  (children: processes whose parent is this one; multiprocessing's resource tracker stays for the\n"
          "   life of the process once a concurrent pipeline ran. mp_children: device processes still tracked)")


def main() -> None:
    """Run the sequential and the concurrent phase and print their resource tables."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sequential", type=int, default=200, help="cycles in sequential mode")
    ap.add_argument("--concurrent", type=int, default=50, help="cycles in concurrent mode")
    ap.add_argument("--concurrent-mode", choices=("processes", "threads"), default="processes")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args()

    import logging

    logging.getLogger("pybuda").setLevel(logging.WARNING)
    os.environ.setdefault("PYBUDA_BUILD_DIR", os.path.join("/tmp", f"pybuda_soak_{os.getpid()}"))
    for var in ("PYBUDA_FORCE_SEQUENTIAL", "PYBUDA_FORCE_CONCURRENT", "PYBUDA_FORCE_THREADS"):
        os.environ.pop(var, None)
    results = []
    if args.sequential:
        results.append(phase("sequential", args.sequential))
    if args.concurrent:
        os.environ["PYBUDA_FORCE_CONCURRENT"] = "1"
        if args.concurrent_mode == "threads":
            os.environ["PYBUDA_FORCE_THREADS"] = "1"
        results.append(phase(f"concurrent ({args.concurrent_mode})", args.concurrent))
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for r in results:
        _print(r)


if __name__ == "__main__":
    main()
