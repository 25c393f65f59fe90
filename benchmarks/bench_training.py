"""One training step of BERT (encoder, seq 128, microbatch 1, as a PyTorchModule with an MSE loss on a CPUDevice)
on the simulated chip against the same step in PyTorch, measured in the same run; plus the modelled training
throughput of the compiled programs on the card.

- compile: ``initialize_pipeline(training=True)`` (capture, autograd, forward/backward/optimizer compiles,
  golden devices set up);
- chip step: ``run_forward`` + ``run_backward`` + ``run_optimizer`` on the golden device (chip numerics);
- torch step: forward + backward + ``torch.optim.SGD.step`` of a copy of the model, eager, float32.

    .venv/bin/python benchmarks/bench_training.py [--variant base] [--seq-len 128] [--df Fp16_b] [--json]
"""

from __future__ import annotations

import argparse
import copy
import json
import time

import torch


def _encoder(variant: str, seq_len: int):
    from pybuda.models import get_model

    spec = get_model("bert", variant, microbatch=1, seq_len=seq_len, task="encoder")
    model = spec.to_pybuda().module
    for module in model.modules():  # the twin must compute the same thing: no dropout in either
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    return model, tuple(spec.example_inputs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default="base")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--df", default="Fp16_b", help="data format of the chip run (Fp16_b, Bfp8_b, Fp32 ...)")
    parser.add_argument("--device", default="wh_n150")
    parser.add_argument("--steps", type=int, default=2, help="chip steps to time (the first includes warm-up)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    import pybuda
    from pybuda.arch import get_device_descriptor
    from pybuda.cli.benchmark import parse_data_format

    model, inputs = _encoder(args.variant, args.seq_len)
    twin = copy.deepcopy(model)
    target = torch.randn_like(model(*inputs))
    df = parse_data_format(args.df)

    # PyTorch: one training step, eager float32 (best of three).
    opt = torch.optim.SGD(twin.parameters(), lr=1e-3)
    torch_seconds = []
    for _ in range(3):
        t0 = time.perf_counter()
        opt.zero_grad()
        torch.nn.functional.mse_loss(twin(*inputs), target).backward()
        opt.step()
        torch_seconds.append(time.perf_counter() - t0)

    pybuda.pybuda_reset()
    pybuda.set_configuration_options(default_df_override=df, device_config=args.device)
    arch = get_device_descriptor(device_config=args.device).arch
    tt0 = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("bert", model), arch=arch,
                          optimizer=pybuda.optimizers.SGD(learning_rate=1e-3))
    cpu = pybuda.CPUDevice("cpu_loss")
    cpu.place_loss_module(pybuda.PyTorchModule("mse", torch.nn.MSELoss()))
    for _ in range(args.steps):
        tt0.push_to_inputs(inputs)
        cpu.push_to_target_inputs(target)
    t0 = time.perf_counter()
    pybuda.initialize_pipeline(training=True)
    compile_seconds = time.perf_counter() - t0
    chip_seconds = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        pybuda.run_forward(1)
        pybuda.run_backward(1, zero_grad=True)
        pybuda.run_optimizer()
        chip_seconds.append(time.perf_counter() - t0)
    perf = tt0.training_performance()
    record = {
        "model": f"bert-{args.variant} encoder", "seq_len": args.seq_len, "data_format": df.name,
        "device": args.device, "compile_seconds": round(compile_seconds, 2),
        "chip_step_seconds": round(min(chip_seconds), 3), "torch_step_seconds": round(min(torch_seconds), 4),
        "chip_over_torch": round(min(chip_seconds) / min(torch_seconds), 1),
        "modeled_training_samples_per_sec": round(perf.samples_per_sec, 1), "epochs": perf.epochs,
    }
    pybuda.shutdown()
    if args.json:
        print(json.dumps(record))
        return
    print(f"{record['model']}, seq {args.seq_len}, {df.name} on {args.device}:")
    print(f"  compile for training (forward + backward + optimizer programs): {compile_seconds:.1f} s")
    print(f"  one training step on the simulated chip: {record['chip_step_seconds']:.2f} s; in PyTorch: "
          f"{record['torch_step_seconds']:.3f} s ({record['chip_over_torch']:.0f}x)")
    print(f"  modelled on the card: {perf.summary()}")


if __name__ == "__main__":
    main()
