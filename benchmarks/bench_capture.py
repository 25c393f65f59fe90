"""Capture + conversion time of BERT-Large (24 layers, hidden 1024, seq 384) with the PyTorch frontend.

Goal: <= 10 s on the 2-core CI CPU. Prints the split (torch.export, decompositions, constant folding,
ATen -> pybuda mapping incl. the CPU fallback split), the graph size, and, for scale, one eager PyTorch
forward of the same model measured in the same run.

    .venv/bin/python benchmarks/bench_capture.py [--task encoder|full] [--layers 24] [--seq-len 384]
        [--repeat 1] [--profile]

``--task encoder`` (default) captures the zoo's BERT-Large encoder (hidden states + attention mask in,
as in TT-Buda's BERT example); ``--task full`` builds a transformers ``BertModel`` (embeddings, encoder,
pooler; input ids in) from a ``BertConfig`` with random weights.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import torch


def build(task: str, layers: int, seq_len: int):
    """(module, example inputs) with random weights; building is not part of the measured time."""
    if task == "encoder":
        from pybuda.models import get_model

        spec = get_model("bert", "large", seq_len=seq_len, num_hidden_layers=layers)
        return spec.module, spec.example_inputs
    import transformers

    config = transformers.BertConfig(hidden_size=1024, num_hidden_layers=layers, num_attention_heads=16,
                                     intermediate_size=4096, max_position_embeddings=max(512, seq_len),
                                     attn_implementation="eager")
    torch.manual_seed(0)
    model = transformers.BertModel(config).eval()
    return model, (torch.randint(0, config.vocab_size, (1, seq_len)),)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", choices=("encoder", "full"), default="encoder")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--seq-len", type=int, default=384)
    ap.add_argument("--repeat", type=int, default=1, help="captures to run; the best is reported")
    ap.add_argument("--profile", action="store_true", help="cProfile the capture, print the top functions")
    args = ap.parse_args()

    from pybuda.frontend.torch import capture

    t0 = time.perf_counter()
    module, inputs = build(args.task, args.layers, args.seq_len)
    print(f"BERT-Large {args.task}: {args.layers} layers, seq {args.seq_len}, "
          f"{sum(p.numel() for p in module.parameters()) / 1e6:.0f} M parameters "
          f"(built in {time.perf_counter() - t0:.1f} s, not counted); torch threads {torch.get_num_threads()}")

    best = None
    for _ in range(args.repeat):
        prof = cProfile.Profile() if args.profile else None
        t0 = time.perf_counter()
        if prof:
            prof.enable()
        result = capture(module, inputs, graph_name=f"bert_large_{args.task}")
        if prof:
            prof.disable()
        total = time.perf_counter() - t0
        if best is None or total < best[0]:
            best = (total, result, prof)
    total, result, prof = best

    t0 = time.perf_counter()
    with torch.no_grad():
        module(*inputs)
    eager = time.perf_counter() - t0

    t = result.timings
    print(f"{'stage':<28}{'seconds':>10}")
    for key, label in (("export", "torch.export"), ("decompose", "run_decompositions"),
                       ("fold", "prepare + constant folding"), ("map", "ATen -> pybuda mapping")):
        print(f"{label:<28}{t.get(key, 0.0):>10.2f}")
    print(f"{'total capture':<28}{total:>10.2f}   (goal <= 10 s: {'met' if total <= 10 else 'MISSED'})")
    print(f"{'eager forward (reference)':<28}{eager:>10.2f}   capture / forward = {total / eager:.1f}x")
    g = result.graph
    print(f"graph: {len(g.ops)} ops, {len(g.parameters)} parameters, {len(g.constants)} constants, "
          f"{len(g.inputs)} inputs, {len(g.outputs)} outputs; fallback: "
          f"{len(result.report.pre_ops)} pre / {len(result.report.post_ops)} post ops")
    if prof:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
