"""Timing helper shared by the benchmark scripts (run them as scripts: ``python benchmarks/bench_x.py``)."""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time
from typing import Callable, Dict, Iterator


def best_times(fns: Dict[str, Callable[[], object]], repeat: int) -> Dict[str, float]:
    """Best time of each function over ``repeat`` interleaved rounds, after one warm-up each: on a
    shared machine the minimum is the signal, and interleaving makes load hit every candidate alike."""
    for fn in fns.values():
        fn()
    best = {name: float("inf") for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def best_time(fn: Callable[[], object], repeat: int) -> float:
    """Best of ``repeat`` runs of one function after a warm-up."""
    return best_times({"fn": fn}, repeat)["fn"]


@contextlib.contextmanager
def fresh_pybuda(**options) -> Iterator[None]:
    """A reset pybuda with ``options`` (``set_configuration_options``) whose build artifacts go to a temporary
    folder; shut down and reset again on exit, ``PYBUDA_BUILD_DIR`` restored."""
    import pybuda

    saved = os.environ.get("PYBUDA_BUILD_DIR")
    with tempfile.TemporaryDirectory() as out_dir:
        os.environ["PYBUDA_BUILD_DIR"] = out_dir
        try:
            pybuda.pybuda_reset()
            pybuda.set_configuration_options(**options)
            yield
        finally:
            pybuda.shutdown()
            pybuda.pybuda_reset()
            if saved is None:
                os.environ.pop("PYBUDA_BUILD_DIR", None)
            else:
                os.environ["PYBUDA_BUILD_DIR"] = saved


def add_model_args(ap: argparse.ArgumentParser) -> None:
    """The zoo model, its size and the target card, as every per-model benchmark takes them."""
    ap.add_argument("--model", default="bert")
    ap.add_argument("--variant", default="large")
    ap.add_argument("--seq-len", type=int, default=None, help="default 384 for BERT")
    ap.add_argument("--image-size", type=int, default=None)
    ap.add_argument("--device", default="gs_e150")


def model_from_args(args: argparse.Namespace):
    """The :class:`pybuda.models.ModelSpec` that :func:`add_model_args`'s options name (BERT at seq 384 by default)."""
    from pybuda.models import get_model

    size = {}
    if args.model == "bert" or args.seq_len:
        size["seq_len"] = args.seq_len or 384
    if args.image_size:
        size["image_size"] = args.image_size
    return get_model(args.model, args.variant, **size)
