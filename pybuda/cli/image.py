"""``pybuda image info PATH`` and ``pybuda image run PATH``: inspect or run a device image (.tti).

``run`` loads the image (every check of :mod:`pybuda.tti.archive` applies), pushes random inputs of the
recorded shapes through ``TTDevice.load_image`` + ``run_inference`` on the simulated chip, prints the
outputs' shapes and statistics, and the performance model's report for the image's card.
"""

from __future__ import annotations

import argparse
import time


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="image_command", required=True)
    info = sub.add_parser("info", help="print what an image holds")
    info.add_argument("path", help="the .tti file")
    run = sub.add_parser("run", help="run an image on random inputs of its recorded shapes")
    run.add_argument("path", help="the .tti file")
    run.add_argument("--loop_count", "--loop-count", dest="loop_count", type=int, default=1,
                     help="pushes to run (default 1)")
    run.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")


def main(args: argparse.Namespace) -> int:
    from pybuda.tti import TTDeviceImage

    t0 = time.perf_counter()
    image = TTDeviceImage.load_from_disk(args.path)
    load_s = time.perf_counter() - t0
    if args.image_command == "info":
        image.info()
        return 0
    return _run(image, args, load_s)


def _run(image, args: argparse.Namespace, load_s: float) -> int:
    import pybuda
    from pybuda.tti.load import estimate_image, image_build, random_inputs

    if args.loop_count < 1:
        from pybuda.errors import ConfigError

        raise ConfigError(f"--loop_count must be >= 1, got {args.loop_count}")
    pybuda.TTDevice.load_image(img=image)  # registers the device: run_inference runs it
    inputs = random_inputs(image, seed=args.seed)
    try:
        t0 = time.perf_counter()
        queue = pybuda.run_inference(inputs=[tuple(inputs)] * args.loop_count)
        outputs = [queue.get() for _ in range(args.loop_count)][-1]
        run_s = time.perf_counter() - t0
    finally:
        pybuda.shutdown()
    print(f"image {args.path}: {image.modules} for {image.device.name} ({image.arch.value}), "
          f"microbatch {image.microbatch_size}")
    for rec, t in zip(image.inputs, inputs):
        print(f"  input  {rec.name}: {list(t.shape)} {rec.dtype}")
    for i, out in enumerate(outputs):
        value = out.value() if hasattr(out, "value") else out
        v = value.float()
        print(f"  output {i}: {list(value.shape)} {str(value.dtype).replace('torch.', '')}  "
              f"mean {v.mean():.5g}  std {v.std() if v.numel() > 1 else 0.0:.5g}  "
              f"min {v.min():.5g}  max {v.max():.5g}")
    print(f"\ntimings: load {load_s:.2f} s, {args.loop_count} push(es) on the simulated chip {run_s:.2f} s")
    from pybuda.config import build_dir
    from pybuda.paths import safe_file_name
    from pybuda.perf.report import write_reports

    for i, (stage, report) in enumerate(zip(image.stages, estimate_image(image))):
        print(f"\nperformance model ({stage.module_name} on {image.device.name}):")
        print(report.summary(max_epochs=4))
        # The HTML report draws each epoch's pipes along their NoC routes, from the image's backend build.
        paths = write_reports(report, build_dir(), basename=f"perf_report_{safe_file_name(stage.module_name)}",
                              routes=image_build(image, i))
        print(f"performance report with routes: {paths['html']}")
    return 0
