"""One training step of BERT (encoder, seq 128, microbatch 1, as a PyTorchModule with an MSE loss on a CPUDevice)
on the simulated chip against the same step in PyTorch, measured in the same run; plus the modelled training
throughput of the compiled programs on the card.

- compile: ``initialize_pipeline(training=True)`` (capture, autograd, forward/backward/optimizer compiles,
  golden devices set up);
- chip step: ``run_forward`` + ``run_backward`` + ``run_optimizer`` on the golden device (chip numerics),
  each phase timed;
- torch step: forward + backward + ``torch.optim.SGD.step`` of a copy of the model, eager, float32;
- both at the same torch thread count (``--threads``; 1 by default, steadier on a shared machine), best of
  ``--steps`` after one warm-up step each; peak resident memory after each side (the chip's includes torch's).

``--modelled`` skips the golden run and only models the training netlist of a BERT with ``--layers`` encoder
layers on the card (``pybuda benchmark -t``'s path, Adam), with each compile phase timed: how BERT-Large's
training throughput is derived when the whole model is too slow to compile here.

    .venv/bin/python benchmarks/bench_training.py [--variant base] [--seq-len 128] [--df Fp16_b] [--json]
    .venv/bin/python benchmarks/bench_training.py --modelled --variant large --layers 4 --seq-len 384 --mb 8
"""

from __future__ import annotations

import argparse
import copy
import json
import resource
import time
from typing import Any, Dict

import torch


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _encoder(variant: str, seq_len: int, layers: int = 0, microbatch: int = 1):
    from pybuda.models import get_model

    extra = {"num_hidden_layers": layers} if layers else {}
    spec = get_model("bert", variant, microbatch=microbatch, seq_len=seq_len, task="encoder", **extra)
    model = spec.to_pybuda().module
    for module in model.modules():  # the twin must compute the same thing: no dropout in either
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    return spec, model, tuple(spec.example_inputs)


def _torch_steps(model: torch.nn.Module, inputs: tuple, target: torch.Tensor, steps: int) -> list:
    """Seconds of each eager float32 training step (forward, MSE, backward, SGD), after one warm-up step."""
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    seconds = []
    for _ in range(steps + 1):
        t0 = time.perf_counter()
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(*inputs), target).backward()
        opt.step()
        seconds.append(time.perf_counter() - t0)
    return seconds[1:]


def chip_step(args: argparse.Namespace) -> Dict[str, Any]:
    """The golden training step against torch's (see the module docstring)."""
    import pybuda
    from pybuda.arch import get_device_descriptor
    from pybuda.cli.benchmark import parse_data_format

    _, model, inputs = _encoder(args.variant, args.seq_len, args.layers)
    twin = copy.deepcopy(model)
    with torch.no_grad():
        target = torch.randn_like(model(*inputs))
    df = parse_data_format(args.df)
    torch_seconds = _torch_steps(twin, inputs, target, args.steps)
    torch_rss = _peak_rss_mib()
    del twin

    pybuda.pybuda_reset()
    pybuda.set_configuration_options(default_df_override=df, device_config=args.device)
    arch = get_device_descriptor(device_config=args.device).arch
    tt0 = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("bert", model), arch=arch,
                          optimizer=pybuda.optimizers.SGD(learning_rate=1e-3))
    cpu = pybuda.CPUDevice("cpu_loss")
    cpu.place_loss_module(pybuda.PyTorchModule("mse", torch.nn.MSELoss()))
    for _ in range(args.steps + 1):
        tt0.push_to_inputs(inputs)
        cpu.push_to_target_inputs(target)
    t0 = time.perf_counter()
    pybuda.initialize_pipeline(training=True)
    compile_seconds = time.perf_counter() - t0
    phases = {"forward": [], "backward": [], "optimizer": []}
    for _ in range(args.steps + 1):  # the first step warms up
        for name, run in (("forward", lambda: pybuda.run_forward(1)),
                          ("backward", lambda: pybuda.run_backward(1, zero_grad=True)),
                          ("optimizer", pybuda.run_optimizer)):
            t0 = time.perf_counter()
            run()
            phases[name].append(time.perf_counter() - t0)
    chip_rss = _peak_rss_mib()
    steps = [sum(parts) for parts in zip(*phases.values())][1:]
    best = min(range(len(steps)), key=steps.__getitem__) + 1
    t0 = time.perf_counter()
    perf = tt0.training_performance()
    model_seconds = time.perf_counter() - t0
    pybuda.shutdown()
    chip, ref = steps[best - 1], min(torch_seconds)
    return {
        "model": f"bert-{args.variant} encoder" + (f" ({args.layers} layers)" if args.layers else ""),
        "seq_len": args.seq_len, "data_format": df.name, "device": args.device, "threads": args.threads,
        "compile_seconds": round(compile_seconds, 2),
        "chip_step_seconds": round(chip, 3), "torch_step_seconds": round(ref, 4),
        "chip_over_torch": round(chip / ref, 2),
        "chip_phase_seconds": {k: round(v[best], 3) for k, v in phases.items()},
        "torch_peak_rss_mib": round(torch_rss), "chip_peak_rss_mib": round(chip_rss),
        "modeled_training_samples_per_sec": round(perf.samples_per_sec, 1), "epochs": perf.epochs,
        "perf_model_seconds": round(model_seconds, 2), "_summary": perf.summary(),
    }


def modelled(args: argparse.Namespace) -> Dict[str, Any]:
    """``pybuda benchmark -t``'s model of a BERT encoder with ``--layers`` layers, each phase timed."""
    from pybuda.cli.benchmark import parse_data_format
    from pybuda.config import CompilerConfig
    from pybuda.dtypes import MathFidelity
    from pybuda.optimizers import Adam
    from pybuda.runtime.training import model_training

    spec, _, inputs = _encoder(args.variant, args.seq_len, args.layers)
    cfg = CompilerConfig(device_config=args.device, default_df_override=parse_data_format(args.df),
                         default_math_fidelity=MathFidelity.HiFi3)
    t0 = time.perf_counter()
    graph = spec.to_pybuda().to_graph(*inputs, graph_name="bert").graph
    capture = time.perf_counter() - t0
    t0 = time.perf_counter()
    tnl, perf = model_training("bert", graph, Adam(learning_rate=1e-4), device_desc=args.device, config=cfg,
                               microbatch=args.mb)
    return {
        "model": f"bert-{args.variant} encoder ({args.layers or 'all'} layers)", "seq_len": args.seq_len,
        "microbatch": args.mb, "data_format": cfg.default_df_override.name, "device": args.device,
        "capture_seconds": round(capture, 1), "compile_and_model_seconds": round(time.perf_counter() - t0, 1),
        "epochs": perf.epochs, "modeled_training_samples_per_sec": round(perf.samples_per_sec, 2),
        "cycles_per_microbatch": int(perf.cycles_per_microbatch),
        "optimizer_cycles": int(perf.cycles_per_step - perf.cycles_per_microbatch), "clock_hz": perf.clock_hz,
        # the parts a per-layer extrapolation needs (see the module docstring of pybuda.perf.training)
        "device_cycles_per_microbatch": sum(r.device_cycles_per_microbatch for r in perf.forward + perf.backward),
        "host_cycles_per_microbatch": int(perf.host_cycles_per_microbatch),
        "binary_bytes_per_microbatch": sum(e.binary_bytes for r in perf.forward + perf.backward for e in r.epochs),
        "_summary": perf.summary(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default="base")
    parser.add_argument("--layers", type=int, default=0, help="encoder layers (0: the variant's)")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--df", default="Fp16_b", help="data format of the chip run (Fp16_b, Bfp8_b, Fp32 ...)")
    parser.add_argument("--device", default="wh_n150")
    parser.add_argument("--steps", type=int, default=2, help="timed steps per side, after one warm-up step")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for both sides")
    parser.add_argument("--modelled", action="store_true", help="only model the training netlist on the card")
    parser.add_argument("--mb", type=int, default=8, help="microbatch of --modelled")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    record = modelled(args) if args.modelled else chip_step(args)
    if args.json:
        print(json.dumps({k: v for k, v in record.items() if not k.startswith("_")}))
        return
    if args.modelled:
        print(f"{record['model']}, seq {record['seq_len']}, microbatch {record['microbatch']}, "
              f"{record['data_format']} on {record['device']}:")
        print(f"  capture {record['capture_seconds']} s; compile, merge and model {record['compile_and_model_seconds']} s")
        print(f"  modelled on the card: {record['_summary']}")
        return
    print(f"{record['model']}, seq {record['seq_len']}, {record['data_format']} on {record['device']}, "
          f"{record['threads']} torch thread(s):")
    print(f"  compile for training (forward + backward + optimizer programs): {record['compile_seconds']:.1f} s")
    ph = record["chip_phase_seconds"]
    rows = [("simulated chip (golden)", record["chip_step_seconds"], record["chip_peak_rss_mib"],
             f"forward {ph['forward']:.2f} + backward {ph['backward']:.2f} + optimizer {ph['optimizer']:.2f}"),
            ("PyTorch eager, float32", record["torch_step_seconds"], record["torch_peak_rss_mib"],
             "forward + backward + SGD")]
    print(f"  | {'one training step':<24} | {'s/step':>8} | {'x torch':>7} | {'peak RSS MiB':>12} | parts (s)")
    for name, sec, rss, parts in rows:
        print(f"  | {name:<24} | {sec:8.3f} | {sec / record['torch_step_seconds']:7.2f} | {rss:12,} | {parts}")
    print(f"  modelled on the card: {record['_summary']}")


if __name__ == "__main__":
    main()
