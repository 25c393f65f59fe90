"""Device images for BERT-base (seq 128, microbatch 1, as a PyTorchModule): image size, and the wait from
loading the image to the first output against a fresh compile to the first output, in the same run.

- fresh compile: ``run_inference`` on a TTDevice holding the model (capture, compile, simulated-chip setup,
  one golden run), until the first output;
- ``compile_to_image``: the offline compile that writes the image (nothing runs);
- load in this process: ``TTDeviceImage.load_from_disk`` + ``TTDevice.load_image`` + ``run_inference`` until the
  first output;
- load in a fresh process: the same, timed inside a new Python process that cannot import the model zoo or
  transformers (its interpreter and torch start-up reported separately);
- one eager PyTorch forward of the same model, for scale.

    .venv/bin/python benchmarks/bench_image.py [--variant base] [--seq-len 128] [--device gs_e150] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = """
import importlib.abc, sys, time
t_start = time.perf_counter()
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("transformers", "tests") or name.startswith("pybuda.models"):
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Block())
import torch, pybuda
from safetensors.torch import load_file
t_imported = time.perf_counter()
saved = load_file(sys.argv[2])
inputs = tuple(saved[f"in{i}"] for i in range(len(saved)))
t0 = time.perf_counter()
pybuda.TTDevice.load_image(img=pybuda.TTDeviceImage.load_from_disk(sys.argv[1]))
pybuda.run_inference(inputs=[inputs]).get()
t1 = time.perf_counter()
pybuda.shutdown()
print(f"{t_imported - t_start:.4f} {t1 - t0:.4f}")
"""


def _first_output_fresh_compile(spec, inputs) -> float:
    import pybuda

    pybuda.pybuda_reset()
    pybuda.TTDevice("tt0", module=spec.to_pybuda())
    t0 = time.perf_counter()
    pybuda.run_inference(inputs=[tuple(inputs)]).get()
    seconds = time.perf_counter() - t0
    pybuda.shutdown()
    pybuda.pybuda_reset()
    return seconds


def _first_output_loaded(path, inputs) -> float:
    import pybuda

    pybuda.pybuda_reset()
    t0 = time.perf_counter()
    pybuda.TTDevice.load_image(img=pybuda.TTDeviceImage.load_from_disk(path))
    pybuda.run_inference(inputs=[tuple(inputs)]).get()
    seconds = time.perf_counter() - t0
    pybuda.shutdown()
    pybuda.pybuda_reset()
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", default="base")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--device", default="gs_e150", help="card preset to compile for")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    import pybuda
    from pybuda.arch import get_device_descriptor
    from pybuda.models import get_model
    from safetensors.torch import save_file

    spec = get_model("bert", args.variant, microbatch=1, seq_len=args.seq_len, task="text_classification")
    inputs = list(spec.example_inputs)
    with torch.no_grad():
        spec.module(*inputs)
        t0 = time.perf_counter()
        spec.module(*inputs)
        torch_s = time.perf_counter() - t0

    pybuda.set_configuration_options(device_config=args.device)
    fresh_s = _first_output_fresh_compile(spec, inputs)

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bert.tti")
        pybuda.set_configuration_options(device_config=args.device)
        arch = get_device_descriptor(device_config=args.device).arch
        device = pybuda.TTDevice("tt0", arch=arch, module=spec.to_pybuda())
        t0 = time.perf_counter()
        device.compile_to_image(img_path=path, sample_inputs=tuple(inputs))
        image_compile_s = time.perf_counter() - t0
        pybuda.pybuda_reset()
        size = os.path.getsize(path)
        loaded_s = _first_output_loaded(path, inputs)

        inputs_path = os.path.join(tmp, "inputs.safetensors")
        save_file({f"in{i}": t.contiguous() for i, t in enumerate(inputs)}, inputs_path)
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", CHILD, path, inputs_path], capture_output=True, text=True,
                              env=dict(os.environ, PYTHONPATH=REPO), check=True)
        child_total_s = time.perf_counter() - t0
        child_import_s, child_first_s = (float(v) for v in proc.stdout.split()[-2:])
    params = sum(p.numel() for p in spec.module.parameters())
    result = {
        "model": f"bert-{args.variant} seq {args.seq_len} mb 1 on {args.device}",
        "parameters": params, "image_bytes": size, "image_bytes_per_parameter": size / params,
        "torch_forward_s": torch_s,
        "fresh_compile_to_first_output_s": fresh_s,
        "compile_to_image_s": image_compile_s,
        "load_to_first_output_s": loaded_s,
        "fresh_process_load_to_first_output_s": child_first_s,
        "fresh_process_python_and_torch_import_s": child_import_s,
        "fresh_process_wall_s": child_total_s,
        "speedup_load_vs_fresh_compile": fresh_s / loaded_s,
    }
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(f"{result['model']}: {params:,} parameters")
    print(f"  image size                         {size / 1e6:10.1f} MB ({size / params:.2f} bytes/parameter)")
    print(f"  one PyTorch forward                {torch_s:10.3f} s")
    print(f"  fresh compile -> first output      {fresh_s:10.3f} s ({fresh_s / torch_s:.1f}x torch)")
    print(f"  compile_to_image (offline)         {image_compile_s:10.3f} s")
    print(f"  load image -> first output         {loaded_s:10.3f} s ({loaded_s / torch_s:.1f}x torch, "
          f"{fresh_s / loaded_s:.1f}x faster than a fresh compile)")
    print(f"  same, in a fresh process           {child_first_s:10.3f} s (+ {child_import_s:.2f} s to import "
          f"python, torch and pybuda; {child_total_s:.2f} s wall)")


if __name__ == "__main__":
    main()
