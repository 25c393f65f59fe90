"""Sweep real models exported from PyTorch to ONNX through pybuda's ONNX frontend on the golden device.

Users bring a model to ``pybuda.OnnxModule`` the way they export it: ``torch.onnx.export``. Each model of
``tools/hf_model_sweep.py`` (Hugging Face architectures, tiny configs) and a selection of
``tools/torch_idiom_sweep.py``'s idioms that real models contain is exported in up to three variants:

* ``static``   the TorchScript exporter, opset 17, every shape fixed;
* ``dynamic``  the same with ``dynamic_axes`` on dim 0 of every input (batch) and dim 1 of integer inputs of
               rank 2 or more (sequence), as users commonly export;
* ``dynamo``   the dynamo exporter (``dynamo=True``; needs ``onnxscript``: without it every model is a SKIP).

The export is loaded with ``onnx``, run through ``pybuda.OnnxModule`` + ``TTDevice`` + ``run_inference``
(Float32, HiFi4: the sweep looks for wrong mechanisms, not for the chip's rounding) and compared with ONNX
Runtime on the same export (with PyTorch when ONNX Runtime is not installed), by ``hf_model_sweep.compare``.
Classes, as in the other sweeps:

* ``DEVICE``            every node ran on the simulated chip and the outputs match;
* ``PARTIAL-FALLBACK``  outputs match, with some nodes on the CPU (the fallback report's host share);
* ``CLEAR-ERROR``       a :class:`pybuda.errors.PybudaError` (the message is printed: judge its clarity);
* ``WRONG``             the run finished but an output differs (shape, PCC below 0.99, not allclose);
* ``CRASH``             any other exception, or no answer within the timeout (a hang);
* ``NUMERICS``          WRONG with the chip's arithmetic but right when the golden computes in plain float32
                        (``golden_ignore_df_precision``): a model sensitive to rounding (a floor of a quotient near
                        an integer), as in ``tools/torch_idiom_sweep.py``;
* ``SKIP``              the model does not run in PyTorch, ``torch.onnx.export`` fails or ONNX Runtime
                        cannot run the export: not pybuda's problem, counted separately.

Every model runs in its own subprocess::

    python tools/onnx_model_sweep.py                              # all models, static variant
    python tools/onnx_model_sweep.py --variant static,dynamic     # two variants of every model
    python tools/onnx_model_sweep.py --filter 'hf/(t5|bart)'      # a regex over model names
    python tools/onnx_model_sweep.py --one hf/t5 --variant dynamic --verbose   # in-process, with the report
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _p in (ROOT, os.path.join(ROOT, "tools")):  # this checkout's pybuda and the sibling sweeps
    if _p not in sys.path:
        sys.path.insert(0, _p)

import torch  # noqa: E402

import hf_model_sweep as hf  # noqa: E402
import torch_idiom_sweep as idioms  # noqa: E402

OPSET = 17
TIMEOUT_S = 300
VARIANTS = ("static", "dynamic", "dynamo")
CLASSES = (*hf.CLASSES, "NUMERICS")

#: Idioms of ``torch_idiom_sweep`` that exported real models contain (masks, positions, gathers, resampling,
#: norms, attention, recurrent layers), and that the ONNX exporter can express.
IDIOMS = (
    "one_hot_argmax_add", "arange_mask_lt", "arange_pos_bias", "argmax_int_out", "argmax_float_math",
    "int_floordiv", "float_floordiv", "int_to_float_mix", "bool_input", "round", "floor", "sign",
    "clamp_tensor_bounds", "clamp_max_only", "cumsum_last", "topk_values", "topk_indices", "gather_const_idx",
    "gather_argmax", "index_select_input", "index_tensor_argmax", "scatter_const", "where_scalar_both",
    "where_broadcast", "where_int", "triu_act", "tril_diag", "causal_mask_fill", "repeat_interleave", "tile",
    "expand", "stack_neg", "chunk", "split_sizes", "flip", "roll", "narrow", "strided_slice", "diagonal",
    "float_to_long", "bool_to_float_sum", "pow_ops", "logs", "erf_family", "trig", "atan2_hypot",
    "masked_fill_tensor_value", "baddbmm_mask", "matmul_vec", "unsqueeze_none", "int_index_neg",
    "pad_reflect", "pad_replicate", "pad_const_val", "pad_circular", "interp_nearest", "interp_nearest_size",
    "interp_bilinear", "interp_bilinear_ac", "interp_bicubic", "interp_down", "interp_scale_1_5",
    "pixel_shuffle", "pixel_unshuffle", "unfold", "einsum_bmm", "einsum_attn", "group_norm", "group_norm_affine",
    "layer_norm_noaffine", "rms_norm", "normalize", "var_unbiased", "std_mean", "logsumexp", "amax_multi",
    "cosine_similarity", "cdist", "prod", "any_all", "act_prelu_conv", "mha_kdim", "tenc_gelu_mask",
    "lstm_2layer", "conv1d", "conv1d_dil_groups", "conv2d_depthwise", "conv2d_reflect", "conv3d", "maxpool1d_ceil",
    "maxpool2d_dil", "avgpool2d_nopadcount", "avgpool2d_ceil", "adaptive_avg2d", "adaptive_max2d", "instance_norm",
    "batchnorm1d", "embedding_padding_idx", "embedding_bag_mean", "linear_no_bias_3d", "upsample_mod",
    "scatter_const_index", "scatter_add_const_graph", "index_put_accumulate", "setitem_const_columns", "index_add",
    "one_hot_of_argmax", "fold", "fold_no_overlap",
)


def model_names() -> List[str]:
    """Every sweep model: ``hf/<name>`` for the Hugging Face models, ``idiom/<name>`` for the idioms and the
    architecture blocks (``tools/architecture_blocks.py``, idioms named ``arch_<name>``)."""
    blocks = [n for n in idioms.CASES if n.startswith("arch_")]
    return [f"hf/{n}" for n in hf.MODELS] + [f"idiom/{n}" for n in (*IDIOMS, *blocks) if n in idioms.CASES]


def build(name: str) -> Tuple[torch.nn.Module, Tuple[torch.Tensor, ...]]:
    """``(eval-mode module, inputs)`` of sweep model ``name`` (``hf/...`` or ``idiom/...``)."""
    kind, _, short = name.partition("/")
    if kind == "hf":
        return hf.build(short)
    if kind == "idiom":
        factory, make_inputs = idioms.CASES[short]
        torch.manual_seed(0)
        return factory().eval(), make_inputs()
    raise KeyError(f"unknown sweep model {name!r}: names start with hf/ or idiom/")


def dynamic_axes(inputs: Tuple[torch.Tensor, ...], names: List[str]) -> Dict[str, Dict[int, str]]:
    """The ``dynamic_axes`` users commonly set: dim 0 of every input (batch, one name for all), dim 1 of integer
    inputs of rank 2 or more (token ids, masks: the sequence, a name of its own per input)."""
    axes: Dict[str, Dict[int, str]] = {}
    for n, t in zip(names, inputs):
        if t.dim() == 0:
            continue
        axes[n] = {0: "batch"}
        if t.dim() >= 2 and not t.is_floating_point():
            axes[n][1] = f"{n}_sequence"  # one name each: ids and decoder ids differ in length
    return axes


def export(module: torch.nn.Module, inputs: Tuple[torch.Tensor, ...], variant: str):
    """``module`` exported by ``torch.onnx.export`` in ``variant``, loaded with ``onnx``."""
    import onnx

    names = [f"input_{i}" for i in range(len(inputs))]
    buf = io.BytesIO()
    if variant == "dynamo":
        program = torch.onnx.export(module, tuple(inputs), dynamo=True, input_names=names, opset_version=OPSET)
        return program.model_proto
    kwargs: Dict[str, Any] = dict(input_names=names, opset_version=OPSET, dynamo=False, do_constant_folding=True)
    if variant == "dynamic":
        kwargs["dynamic_axes"] = dynamic_axes(inputs, names)
    torch.onnx.export(module, tuple(inputs), buf, **kwargs)
    return onnx.load_from_string(buf.getvalue())


def with_attention_mask(module: torch.nn.Module, inputs: Tuple[torch.Tensor, ...]):
    """A Hugging Face model called with ``input_ids`` alone, with an all-ones ``attention_mask`` input added:
    ``(module, inputs)``, or None when that does not apply. Users export decoders with both; without a mask,
    transformers' packed-sequence check (``torch.diff``) is traced, which the TorchScript exporter lacks."""
    import inspect

    if not isinstance(module, hf.Pick) or module.names != ("input_ids",) or module.method:
        return None
    if "attention_mask" not in inspect.signature(module.model.forward).parameters:
        return None
    masked = hf.Pick(module.model, ("input_ids", "attention_mask"), module.fields, module.extra).eval()
    return masked, (inputs[0], torch.ones_like(inputs[0]))


def reference(model, inputs: Tuple[torch.Tensor, ...], want_torch: List[torch.Tensor]) -> List[torch.Tensor]:
    """The export's outputs in ONNX Runtime (PyTorch's when ONNX Runtime is not installed)."""
    try:
        import onnxruntime as ort
    except ImportError:
        return want_torch
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {i.name: t.detach().numpy() for i, t in zip(sess.get_inputs(), inputs)}
    return [torch.from_numpy(o.copy()) if hasattr(o, "copy") else torch.as_tensor(o) for o in sess.run(None, feeds)]


def run_one(name: str, variant: str = "static", verbose: bool = False) -> Dict[str, Any]:
    """Run sweep model ``name`` exported as ``variant`` on a golden Wormhole B0; a result dict (see module doc)."""
    import warnings


    warnings.filterwarnings("ignore")
    result: Dict[str, Any] = dict(name=name, variant=variant, cls=None, pcc=None, host=None, detail="")
    t0 = time.time()
    try:
        module, inputs = build(name)
        with torch.no_grad():
            want_torch = hf._flat(module(*[t.clone() for t in inputs]))
    except Exception as exc:  # the model itself does not run in PyTorch
        result.update(cls="SKIP", detail=f"does not build/run in PyTorch: {type(exc).__name__}: {exc}"[:300])
        return result
    try:
        with torch.no_grad():
            try:
                model = export(module, inputs, variant)
            except Exception:
                masked = with_attention_mask(module, inputs)
                if masked is None:
                    raise
                module, inputs = masked  # as users export decoders: ids and an attention mask
                with torch.no_grad():
                    want_torch = hf._flat(module(*[t.clone() for t in inputs]))
                model = export(module, inputs, variant)
                result["detail"] = "exported with an all-ones attention_mask input"
    except Exception as exc:  # torch's exporter: not pybuda's problem
        result.update(cls="SKIP", detail=f"torch.onnx.export ({variant}) fails: {type(exc).__name__}: "
                                         f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:300])
        return result
    try:
        want = reference(model, inputs, want_torch)
    except Exception as exc:
        result.update(cls="SKIP", detail=f"ONNX Runtime cannot run the export: {type(exc).__name__}: {exc}"[:300])
        return result

    try:
        got, report = _run_on_device(name, model, inputs)
    except Exception as exc:
        return hf.failed(result, exc, verbose)
    result["seconds"] = round(time.time() - t0, 1)
    note = result["detail"]
    if report is not None:
        result["host"] = round(report.host_fraction, 4)
        if verbose:
            print(report)
    pcc, problems = hf.compare(got, want, reference="ONNX Runtime")
    result["pcc"] = pcc
    if problems:
        result.update(cls="WRONG", detail="; ".join(problems))
        try:  # right when the golden computes in plain float32: the chip's arithmetic, not the program
            exact, _ = _run_on_device(name, model, inputs, plain_float32=True)
            if not hf.compare(exact, want, reference="ONNX Runtime")[1]:
                result["cls"] = "NUMERICS"
        except Exception:
            pass
    elif report is not None and report.has_fallback:
        result.update(cls="PARTIAL-FALLBACK", detail=", ".join(sorted(set(report.op_names())))[:300])
    else:
        result["cls"] = "DEVICE"
    if note:
        result["detail"] = f"{result['detail']} ({note})" if result["detail"] else note
    return result


def _run_on_device(name: str, model, inputs: Tuple[torch.Tensor, ...], plain_float32: bool = False):
    """``(outputs, fallback report)`` of ``model`` through ``OnnxModule`` on a golden Wormhole B0 at Float32/HiFi4;
    ``plain_float32``: the golden computes in plain float32 (``golden_ignore_df_precision``)."""
    import pybuda
    from pybuda.module import OnnxModule

    captures: List[Any] = []
    real_to_graph = OnnxModule.to_graph

    def to_graph(self, *args: Any, **kwargs: Any):
        got = real_to_graph(self, *args, **kwargs)
        captures.append(got)
        return got

    OnnxModule.to_graph = to_graph
    try:
        pybuda.pybuda_reset()
        pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32,
                                         math_fidelity=pybuda.MathFidelity.HiFi4)
        if plain_float32:
            pybuda.set_configuration_options(golden_ignore_df_precision=True)
        pybuda.TTDevice("tt0", module=pybuda.OnnxModule(name.replace("/", "_"), model),
                        arch=pybuda.BackendDevice.Wormhole_B0)
        got = hf._flat(pybuda.run_inference(inputs=[tuple(t.clone() for t in inputs)]).get(timeout=TIMEOUT_S))
    finally:
        OnnxModule.to_graph = real_to_graph
        try:
            pybuda.shutdown()
        except Exception:
            pass
    return got, (captures[-1].report if captures else None)


def _subprocess(name: str, variants: List[str], timeout: int) -> List[Dict[str, Any]]:
    """Every variant of model ``name`` in one child process (one import of torch and pybuda)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--one", name, "--variant", ",".join(variants), "--json"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout * len(variants))
        stdout, failure = proc.stdout, f"process exited {proc.returncode}: {(proc.stderr or proc.stdout)[-800:]}"
    except subprocess.TimeoutExpired as exc:
        stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        failure = f"hang: no answer in {timeout * len(variants)}s"
    done = {}
    for line in stdout.splitlines():
        if line.startswith("{"):
            out = json.loads(line)
            done[out["variant"]] = out
    return [done.get(v) or dict(name=name, variant=v, cls="CRASH", pcc=None, host=None, detail=failure)
            for v in variants]


def _line(r: Dict[str, Any]) -> str:
    pcc = f"{r['pcc']:.4f}" if r.get("pcc") is not None else "-"
    host = f"{100 * r['host']:.1f}%" if r.get("host") is not None else "-"
    detail = r.get("detail", "").splitlines()[0][:160] if r.get("detail") else ""
    return f"{r['name']:<34} {r['variant']:<8} {r['cls']:<17} {pcc:>7} {host:>6}  {detail}"


def summary(results: List[Dict[str, Any]]) -> str:
    """Class counts per variant and the mean host share of the partial fallbacks."""
    lines = []
    for variant in dict.fromkeys(r["variant"] for r in results):
        rs = [r for r in results if r["variant"] == variant]
        counts = {c: sum(r["cls"] == c for r in rs) for c in (*CLASSES, "SKIP")}
        hosts = [r["host"] for r in rs if r["cls"] == "PARTIAL-FALLBACK" and r.get("host") is not None]
        share = f"; partial fallbacks' mean host share {100 * sum(hosts) / len(hosts):.1f}%" if hosts else ""
        lines.append(f"totals {variant}: " + ", ".join(f"{c} {n}" for c, n in counts.items() if n) + share)
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--filter", help="regex over model names (hf/<name>, idiom/<name>)")
    ap.add_argument("--variant", default="static", help=f"comma-separated, of {', '.join(VARIANTS)}")
    ap.add_argument("--one", help="run one model in this process")
    ap.add_argument("--json", action="store_true", help="with --one: print the result as one JSON line")
    ap.add_argument("--jsonl", help="also append every result as a JSON line to this file")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--timeout", type=int, default=TIMEOUT_S)
    args = ap.parse_args(argv)
    variants = [v for v in args.variant.split(",") if v]
    bad = [v for v in variants if v not in VARIANTS]
    if bad:
        ap.error(f"unknown variant(s) {bad}: choose from {VARIANTS}")
    if args.one:
        for variant in variants:
            r = run_one(args.one, variant, verbose=args.verbose)
            print(json.dumps(r) if args.json else _line(r) + ("\n" + r["detail"] if args.verbose else ""), flush=True)
        return 0
    names = [n for n in model_names() if not args.filter or re.search(args.filter, n)]
    if args.list:
        print("\n".join(names))
        return 0
    print(f"{'model':<34} {'variant':<8} {'class':<17} {'PCC':>7} {'host':>6}  detail")
    results = []
    for name in names:
        for r in _subprocess(name, variants, args.timeout):
            results.append(r)
            print(_line(r), flush=True)
            if args.jsonl:
                with open(args.jsonl, "a") as f:
                    f.write(json.dumps(r) + "\n")
    print(summary(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
