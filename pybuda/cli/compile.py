"""``pybuda compile``: compile a model from :mod:`pybuda.models` into a placed netlist and print a summary.

Example::

    pybuda compile -m bert -c base --device-config wh_n150 -df Bfp8_b -mf LoFi --seq-len 128 -mb 1
    pybuda compile -m resnet -c resnet50 --device-config gs_e150 --balancer-policy Ribbon --output-dir out/

The netlist, the config snapshot and the placement report are written to ``--output-dir`` (default: the
build directory, ``$PYBUDA_BUILD_DIR`` or ``./tt_build``).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Optional

from pybuda.config import BALANCER_POLICIES, DEVICE_CONFIGS, CompileDepth

FORMATS = ("Float32", "Float16", "Float16_b", "Bfp8", "Bfp8_b", "Bfp4", "Bfp4_b", "Bfp2", "Bfp2_b")
FIDELITIES = ("LoFi", "HiFi2", "HiFi3", "HiFi4")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``pybuda compile`` options."""
    parser.add_argument("-m", "--model", required=True, help="model name from pybuda.models (bert, resnet, ...)")
    parser.add_argument("-c", "--config", default="base", help="model variant (tiny, base, large, resnet50 ...)")
    parser.add_argument("--device-config", default="wh_n150", choices=DEVICE_CONFIGS, help="target card")
    parser.add_argument("-df", "--dataformat", default=None, choices=FORMATS, help="default_df_override")
    parser.add_argument("-mf", "--math-fidelity", default=None, choices=FIDELITIES, help="default_math_fidelity")
    parser.add_argument("--acc-df", default=None, choices=("Float16", "Float16_b", "Float32"),
                        help="default_accumulate_df")
    parser.add_argument("--amp-level", type=int, default=None, choices=(1, 2, 3), help="automatic mixed precision")
    parser.add_argument("--seq-len", type=int, default=None, help="sequence length (text/audio models)")
    parser.add_argument("--image-size", type=int, default=None, help="image size (vision models)")
    parser.add_argument("-mb", "--microbatch", type=int, default=1, help="microbatch size")
    parser.add_argument("--balancer-policy", default=None, choices=BALANCER_POLICIES, help="balancer policy")
    parser.add_argument("--compile-depth", default=None, choices=[d.name for d in CompileDepth],
                        help="stop after this stage")
    parser.add_argument("--no-fusing", action="store_true", help="disable automatic op fusion")
    parser.add_argument("--output-dir", default=None, help="where to write the netlist and reports")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--seed", type=int, default=0, help="seed of the model's random weights")


def main(args: argparse.Namespace) -> int:
    """Build the model, capture it, compile it and print the summary; returns the exit code."""
    from pybuda.config import CompilerConfig
    from pybuda.models import get_model
    from pybuda.compile import compile_graph

    cfg = CompilerConfig()
    cfg.device_config = args.device_config
    if args.dataformat:
        cfg.default_df_override = _df(args.dataformat)
    if args.math_fidelity:
        from pybuda.dtypes import MathFidelity

        cfg.default_math_fidelity = MathFidelity.from_json(args.math_fidelity)
    if args.acc_df:
        cfg.default_accumulate_df = _df(args.acc_df)
    if args.amp_level:
        cfg.amp_level = args.amp_level
    if args.balancer_policy:
        cfg.balancer_policy = args.balancer_policy
    if args.compile_depth:
        cfg.compile_depth = CompileDepth[args.compile_depth]
    if args.no_fusing:
        cfg.enable_auto_fusing = False
    if args.output_dir:
        cfg.backend_output_dir = args.output_dir
    size = {}
    if args.seq_len is not None:
        size["seq_len"] = args.seq_len
    if args.image_size is not None:
        size["image_size"] = args.image_size
    t0 = time.perf_counter()
    spec = get_model(args.model, args.config, microbatch=args.microbatch, seed=args.seed, **size)
    capture = spec.to_pybuda().to_graph(*spec.example_inputs)
    capture_s = time.perf_counter() - t0
    graph = capture.graph
    graph.microbatch = args.microbatch
    results = compile_graph(graph, args.device_config, cfg, None, args.microbatch)
    summary = results.summary
    if args.json:
        out = summary.to_dict()
        out.update({"capture_seconds": capture_s, "stage_timings": results.stage_timings,
                    "artifacts": results.artifacts})
        print(json.dumps(out, indent=1, default=str))
        return 0
    print(f"model {spec.full_name}: {spec.description}")
    print(f"captured in {capture_s:.2f} s ({len(graph.ops)} ops"
          f"{', CPU fallback: ' + str(capture.report) if capture.pre is not None or capture.post is not None else ''})")
    print(summary)
    print("stage timings: " + ", ".join(f"{k} {v:.2f}s" for k, v in results.stage_timings.items() if v >= 0.005))
    for kind, path in results.artifacts.items():
        print(f"{kind}: {path}")
    return 0


def _df(name: str):
    from pybuda.dtypes import DataFormat

    return DataFormat.from_json(name)


def run(argv: Optional[list] = None) -> int:
    """Run ``pybuda compile`` with ``argv`` (for tests)."""
    parser = argparse.ArgumentParser(prog="pybuda compile")
    add_arguments(parser)
    return main(parser.parse_args(argv))
