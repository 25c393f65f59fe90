"""Run ONNX's backend node test cases through pybuda's ONNX backend (golden device, Float32).

Prints one line per case — ``pass`` (every node on the device), ``fallback-pass`` (correct, with some nodes
run by ONNX Runtime on the CPU), ``fail`` (wrong result or an error) — and the totals.

The node cases are the ones the ``onnx`` package defines (``onnx.backend.test.case.node``); the runner builds
their models and data in memory. ``--data-dir`` additionally writes the on-disk test data with
``python -m onnx.backend.test.cmd_tools generate-data`` (into a cache dir, never the repository) when absent.

    python tools/onnx_backend_report.py [--jobs 2] [--filter REGEX] [--quiet] [--reasons]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from typing import List, Optional, Tuple

CASE_TIMEOUT_S = 60
#: Print why each host node of a fallback-pass case runs on the host (``--reasons``).
REASONS = False


def _generate_data(path: str) -> None:
    if os.path.isdir(path) and os.listdir(path):
        return
    os.makedirs(path, exist_ok=True)
    subprocess.run([sys.executable, "-m", "onnx.backend.test.cmd_tools", "generate-data", "-o", path], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _cases(pattern: Optional[str]):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.loader import load_model_tests

        cases = load_model_tests(kind="node")
    if pattern:
        rx = re.compile(pattern)
        cases = [c for c in cases if rx.search(c.name)]
    return sorted(cases, key=lambda c: c.name)


def _alarm(signum, frame):  # pragma: no cover - only on a hung case
    raise TimeoutError(f"case took longer than {CASE_TIMEOUT_S}s")


def run_case(case) -> Tuple[str, str, str]:
    """(name, status, detail) for one node test case."""
    import numpy as np  # noqa: F401
    from onnx.backend.test.runner import Runner, _normalize_tensor

    from pybuda.frontend.onnx.backend import PybudaBackend

    if hasattr(signal, "SIGALRM"):
        signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(CASE_TIMEOUT_S)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rep = PybudaBackend.prepare(case.model, "CPU")
            fallback = False
            for inputs, ref_outputs in case.data_sets:
                outs = rep.run([_normalize_tensor(i) for i in inputs])
                fallback = fallback or bool(rep.report is not None and rep.report.has_fallback)
                Runner.assert_similar_outputs([_normalize_tensor(o) for o in ref_outputs], list(outs),
                                              rtol=case.rtol, atol=case.atol)
        if fallback:
            ops = ", ".join(sorted({f.aten_op for f in rep.report.fallback_ops}))
            detail = f"host: {ops}"
            if REASONS:
                why = sorted({f"{f.aten_op}: {' '.join(f.reason.split())[:140]}" for f in rep.report.fallback_ops})
                detail += " | " + " | ".join(why)
            return case.name, "fallback-pass", detail
        return case.name, "pass", ""
    except BaseException as e:  # noqa: BLE001 - every failure is a line of the report
        msg = " ".join(str(e).split())[:160]
        return case.name, "fail", f"{type(e).__name__}: {msg}"
    finally:
        if hasattr(signal, "SIGALRM"):
            signal.alarm(0)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--filter", default=None, help="only cases whose name matches this regex")
    parser.add_argument("--quiet", action="store_true", help="print failures and totals only")
    parser.add_argument("--data-dir", default=None,
                        help="also generate ONNX's on-disk test data here when absent (e.g. a temp dir)")
    parser.add_argument("--reasons", action="store_true", help="say why each host node of a fallback-pass case "
                                                                 "runs on the host")
    args = parser.parse_args(argv)
    global REASONS
    REASONS = args.reasons
    if args.data_dir:
        _generate_data(args.data_dir)
    os.environ.setdefault("PYBUDA_LOG_LEVEL", "ERROR")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import logging

    logging.disable(logging.WARNING)
    start = time.perf_counter()
    cases = _cases(args.filter)
    counts = {"pass": 0, "fallback-pass": 0, "fail": 0}
    if args.jobs > 1:
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(args.jobs, maxtasksperchild=200) as pool:
            results = pool.imap(run_case, cases, chunksize=4)
            for name, status, detail in results:
                counts[status] += 1
                if not args.quiet or status == "fail":
                    print(f"{status:14s} {name}  {detail}".rstrip(), flush=True)
    else:
        for case in cases:
            name, status, detail = run_case(case)
            counts[status] += 1
            if not args.quiet or status == "fail":
                print(f"{status:14s} {name}  {detail}".rstrip(), flush=True)
    total = sum(counts.values())
    ok = counts["pass"] + counts["fallback-pass"]
    print(f"\ntotal {total}: pass {counts['pass']}, fallback-pass {counts['fallback-pass']}, fail {counts['fail']}; "
          f"correct {ok}/{total} = {100.0 * ok / max(total, 1):.1f}% in {time.perf_counter() - start:.0f}s "
          f"({args.jobs} job(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
