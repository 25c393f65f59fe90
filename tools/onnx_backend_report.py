"""Run ONNX's backend node test cases through pybuda's ONNX backend (golden device, Float32).

Prints one line per case — ``pass`` (every node on the device), ``fallback-pass`` (correct, with some nodes
run by ONNX Runtime on the CPU), ``fail`` (wrong result or an error), ``random`` (a case whose expected values
are one draw of a random op — Bernoulli, RandomNormal, training-mode Dropout ...: ONNX defines such values as
implementation-specific even with a seed, and its node cases draw them from numpy's global generator — whose
values differ from pybuda's while their shapes and element types match; counted apart from the percentages),
and ``M`` when the case is
*registry-mappable* (every op it computes has a converter onto registry ops and every value it computes is
device data: the rule of :func:`pybuda.frontend.onnx.coverage.device_mappable`) — then the totals, the same
totals for the mappable subset, and every mappable case that still runs nodes on the host, with why.

The node cases are the ones the ``onnx`` package defines (``onnx.backend.test.case.node``); the runner builds
their models and data in memory. ``--data-dir`` additionally writes the on-disk test data with
``python -m onnx.backend.test.cmd_tools generate-data`` (into a cache dir, never the repository) when absent.

    python tools/onnx_backend_report.py [--jobs 2] [--filter REGEX] [--quiet] [--reasons] [--why-not]
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


def mappable_reason(case) -> Optional[str]:
    """None when ``case`` is registry-mappable (on its first data set), else why not."""
    from onnx.backend.test.runner import _normalize_tensor

    from pybuda.frontend.onnx.coverage import device_mappable

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return device_mappable(case.model, [_normalize_tensor(i) for i in case.data_sets[0][0]])
    except Exception as e:  # noqa: BLE001 - a model the importer rejects is not mappable; say why
        return f"{type(e).__name__}: {' '.join(str(e).split())[:120]}"


def run_case(case) -> Tuple[str, str, str, Optional[str]]:
    """(name, status, detail, why not mappable — None when mappable) for one node test case."""
    status = _run(case)
    return (*status, mappable_reason(case))


def _run(case) -> Tuple[str, str, str]:
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
                feeds = [_normalize_tensor(i) for i in inputs]
                outs = rep.run(feeds)
                fallback = fallback or bool(rep.report is not None and rep.report.has_fallback)
                refs = [_normalize_tensor(o) for o in ref_outputs]
                try:
                    _assert_similar(Runner, refs, list(outs), case.rtol, case.atol)
                except AssertionError:
                    if not _random_draw(case.model, feeds) or not _same_layout(refs, list(outs)):
                        raise
                    return case.name, "random", "expected values are a random draw; shapes and types match"
        if fallback:
            ops = ", ".join(sorted({f.aten_op for f in rep.report.fallback_ops}))
            why = sorted({f"{f.aten_op}: {' '.join(f.reason.split())[:140]}" for f in rep.report.fallback_ops})
            return case.name, "fallback-pass", f"host: {ops} | " + " | ".join(why)
        return case.name, "pass", ""
    except BaseException as e:  # noqa: BLE001 - every failure is a line of the report
        msg = " ".join(str(e).split())[:160]
        return case.name, "fail", f"{type(e).__name__}: {msg}"
    finally:
        if hasattr(signal, "SIGALRM"):
            signal.alarm(0)


def _assert_similar(runner, refs, outs, rtol: float, atol: float) -> None:
    """ONNX's runner comparison, sequence outputs compared element by element as one-output lists (the
    runner passes a sequence's elements on as if they were output lists, which fails on a 0-d element)."""
    if len(refs) != len(outs):
        raise AssertionError(f"{len(outs)} outputs, expected {len(refs)}")
    for ref, out in zip(refs, outs):
        if isinstance(ref, (list, tuple)) and isinstance(out, (list, tuple)):
            if len(ref) != len(out):
                raise AssertionError(f"a sequence of {len(out)} tensors, expected {len(ref)}")
            for r, o in zip(ref, out):
                _assert_similar(runner, [r], [o], rtol, atol)
        else:
            runner.assert_similar_outputs([ref], [out], rtol=rtol, atol=atol)


def _random_draw(model, feeds) -> bool:
    """True when a node of ``model`` (run on ``feeds``) draws random numbers."""
    from pybuda.frontend.onnx.coverage import draws_random

    samples = {vi.name: f for vi, f in zip(model.graph.input, feeds)}
    return any(draws_random(node, samples) for node in model.graph.node)


def _same_layout(refs, outs) -> bool:
    """True when ``outs`` have the shapes and element types of ``refs``."""
    import numpy as np

    return len(refs) == len(outs) and all(
        np.shape(r) == np.shape(o) and np.asarray(r).dtype == np.asarray(o).dtype for r, o in zip(refs, outs))


def _totals(label: str, statuses: List[str]) -> str:
    counts = {k: statuses.count(k) for k in ("pass", "fallback-pass", "fail", "random")}
    total = len(statuses) - counts["random"]
    ok = counts["pass"] + counts["fallback-pass"]
    drawn = f" (and {counts['random']} random-draw cases)" if counts["random"] else ""
    return (f"{label} {total}{drawn}: pass {counts['pass']}, fallback-pass {counts['fallback-pass']}, "
            f"fail {counts['fail']}; correct {ok}/{total} = {100.0 * ok / max(total, 1):.1f}%")


def _why_group(why_not: str) -> str:
    """A reason without its node and value names (so equal causes group together)."""
    text = re.sub(r"\(node '[^']*'\)", "", why_not)
    text = re.sub(r"'[^']*'", "'…'", text)
    return re.sub(r"\[[^\]]*\]", "[…]", text).strip()


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--filter", default=None, help="only cases whose name matches this regex")
    parser.add_argument("--quiet", action="store_true", help="print failures and totals only")
    parser.add_argument("--data-dir", default=None,
                        help="also generate ONNX's on-disk test data here when absent (e.g. a temp dir)")
    parser.add_argument("--reasons", action="store_true", help="say why each host node of a fallback-pass case "
                                                                 "runs on the host")
    parser.add_argument("--why-not", action="store_true", help="group the cases that are not registry-mappable "
                                                                    "by reason")
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
    results = []

    def show(result) -> None:
        name, status, detail, why_not = result
        results.append(result)
        mappable = why_not is None
        if not REASONS and status == "fallback-pass":
            detail = detail.split(" | ")[0]
        if not args.quiet or status == "fail":
            print(f"{status:14s} {'M' if mappable else '-'} {name}  {detail}".rstrip(), flush=True)

    if args.jobs > 1:
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(args.jobs, maxtasksperchild=200) as pool:
            for result in pool.imap(run_case, cases, chunksize=4):
                show(result)
    else:
        for case in cases:
            show(run_case(case))
    print()
    print(_totals("total", [r[1] for r in results]) +
          f" in {time.perf_counter() - start:.0f}s ({args.jobs} job(s))")
    mappable = [r for r in results if r[3] is None]
    print(_totals("registry-mappable", [r[1] for r in mappable]) +
          f"; on the device {sum(r[1] == 'pass' for r in mappable)}/{len(mappable)}")
    rest = [r for r in mappable if r[1] != "pass"]
    if rest:
        print("mappable cases not wholly on the device:")
        for name, status, detail, _ in rest:
            print(f"  {status:14s} {name}  {detail}")
    if args.why_not:
        groups: dict = {}
        for name, _, _, why_not in results:
            if why_not is not None:
                groups.setdefault(_why_group(why_not), []).append(name)
        print("not mappable, by reason:")
        for key, names in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            print(f"  {len(names):4d}  {key}  (e.g. {names[0]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
