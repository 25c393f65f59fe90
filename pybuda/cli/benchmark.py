"""``pybuda benchmark``: how fast a zoo model runs — on this host, and modelled on the real card.

Every flag of tenstorrent/benchmarking's ``benchmark.py`` parses (``-d tt|cpu|cuda``, ``-m``, ``-c``,
``--task``, ``-mb``, ``--loop_count``, ``-df``, ``-adf``, ``-mf``, ``-opt``, ``--chips``, ``--trace``, ``-e``,
``-l``, ``--auto_transpose``, ``--num_tokens``, ``-t``, ``--recompute``, ``-di``/``-dit``/``-dic``,
``--model_output``, ``--save_output``, ``--save_tti``, ``--load_tti``), plus ``--device-config`` (the card),
``--perf-only`` (compile and model, skip numerics) and ``--output-dir``. Each flag takes effect, or raises
ConfigError naming it where pybuda cannot honour it (:data:`FLAG_RULES`). Abbreviations are off
(``-di`` is ``--dump_intermediate``, never ``-d i``), and an unknown flag is an error.

With ``-d tt`` the model is compiled for the card; the performance model
(:func:`pybuda.perf.model.estimate`) turns the netlist into modelled card throughput, and — unless
``--perf-only`` — the compiled model runs ``loop_count`` microbatches on the simulated chip through the
runtime, timed like benchmarking's harness (first input pushed to last output received, after compile).
With ``-d cpu`` the PyTorch model runs on the host only. Performance reports
(``perf_report.csv/.json/.html``) go to the build directory.

The balancer policy defaults to pybuda's own (NLP: one global cycle target for the whole model, the
compile default too); ``--balancer-policy Ribbon`` reproduces the placement policy of the published TT-Buda runs, which is what
the calibration against them uses. Besides benchmarking's models, ``vovnet_v2`` (``-c 39``),
``inception_v4``, ``hrnet`` (``-c v2_w64``) and ``unet`` (256x256 by default) are built from their papers.

As in the published benchmark runs, BERT runs exp in the SFPU's approximate mode
(``CompilerConfig.exp_approx``, TT-Buda's ``PYBUDA_EXP_APPROX``) and, in a ``Bfp8*`` format, keeps the
outputs of add, subtract and reciprocal in Float16_b (``configure_mixed_precision``), which is what
benchmarking's BERT did.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Tuple

from pybuda.errors import ConfigError
from pybuda.dtypes import DataFormat, MathFidelity

log = logging.getLogger(__name__)

#: Models this command benchmarks (benchmarking's ``-m`` names) and their default ``-c`` config.
MODELS: Dict[str, str] = {
    "bert": "base", "resnet": "resnet50", "mobilenet_v1": "base", "mobilenet_v2": "base", "vit": "base",
    "gpt2": "small", "whisper": "tiny", "vovnet_v2": "39", "inception_v4": "base", "hrnet": "v2_w64",
    "unet": "base",
}

#: Default input size per (model, config) where the model's own default is not what benchmarking used:
#: BERT-Large ran at sequence 384 (perf_calibration §1), the others at 128; vision models at 224.
_DEFAULT_SEQ = {("bert", "large"): 384}
#: Vision models benchmarking ran at another size than 224: U-Net at 256x256 (``unet -c 256``).
_DEFAULT_IMAGE = {"unet": 256}

#: benchmarking's data-format spellings → DataFormat names.
_DF_ALIASES = {"fp32": "Float32", "fp16": "Float16", "fp16_b": "Float16_b", "bf16": "Float16_b",
               "bfp8": "Bfp8", "bfp8_b": "Bfp8_b", "bfp4": "Bfp4", "bfp4_b": "Bfp4_b", "bfp2": "Bfp2",
               "bfp2_b": "Bfp2_b", "lf8": "Lf8", "int8": "Int8"}

DEVICE_CONFIGS = ("gs_e75", "gs_e150", "wh_n150", "wh_n300", "bh_p150")


def parse_data_format(text: str) -> DataFormat:
    """A data format from benchmarking's spelling (``Fp16``, ``Fp16_b``, ``Bfp8``, ``Bfp8_b`` …) or a
    DataFormat name (``Float16_b``); ConfigError otherwise."""
    name = _DF_ALIASES.get(str(text).lower(), text)
    for df in DataFormat:
        if df.name.lower() == str(name).lower() and df != DataFormat.Invalid:
            return df
    raise ConfigError(f"unknown data format '{text}'; use one of Fp32, Fp16, Fp16_b, Bfp8, Bfp8_b, Bfp4_b "
                      f"or a DataFormat name ({', '.join(d.name for d in DataFormat if d != DataFormat.Invalid)})")


def parse_math_fidelity(text: str) -> MathFidelity:
    """LoFi, HiFi2, HiFi3 or HiFi4 (case-insensitive); ConfigError otherwise."""
    for mf in (MathFidelity.LoFi, MathFidelity.HiFi2, MathFidelity.HiFi3, MathFidelity.HiFi4):
        if mf.name.lower() == str(text).lower():
            return mf
    raise ConfigError(f"unknown math fidelity '{text}'; use LoFi, HiFi2, HiFi3 or HiFi4")


#: benchmarking flags pybuda cannot honour: flag → why (ConfigError naming the flag when it is given).
FLAG_RULES: Dict[str, str] = {
    "--recompute": "recompute is a training option: use it with -t/--training",
    "--num_tokens": "pybuda's benchmark runs one forward pass per microbatch; token-by-token generation is not "
                    "benchmarked (leave --num_tokens at 1)",
}
_TRACE_LEVELS = {"none": "NONE", "light": "LIGHT", "verbose": "VERBOSE"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``pybuda benchmark`` flags on ``parser`` (and turn prefix matching off on it)."""
    # benchmarking's single-dash options (-di, -dit, -dic, -df, -adf, -mb, -mf, -opt) must never be read as a
    # prefix or as '-d' with a value: exact option names only.
    parser.allow_abbrev = False
    parser.add_argument("-d", "--device", choices=("tt", "cpu", "cuda"), default="tt",
                        help="tt: compile for the card and model it (and run on the simulated chip); cpu: PyTorch; "
                             "cuda: PyTorch on a CUDA GPU (ConfigError without one)")
    parser.add_argument("-m", "--model", default=None, choices=sorted(MODELS), help="model to benchmark")
    parser.add_argument("-l", "--list", action="store_true", help="list the models and their configs, and exit")
    parser.add_argument("-t", "--training", action="store_true",
                        help="benchmark training: compile forward, backward and optimizer programs and model a "
                             "training step on the card (the loop is not run on the simulated chip)")
    parser.add_argument("-adf", "--acc_dataformat", default=None,
                        help="accumulation data format (Fp32, Fp16, Fp16_b, Bfp8, Bfp8_b, Bfp4, Bfp4_b)")
    parser.add_argument("-opt", "--backend_opt_level", type=int, choices=(0, 1, 2, 3, 4), default=None,
                        help="backend optimisation level (accepted; the simulated chip has no backend runtime to tune)")
    parser.add_argument("--num_tokens", type=int, default=1,
                        help="tokens for text generation models (only 1: generation is not benchmarked)")
    parser.add_argument("--chips", type=int, default=1, help="number of chips to compile for (default 1)")
    parser.add_argument("--recompute", action="store_true",
                        help="with -t: the backward recomputes activations instead of saving them")
    parser.add_argument("--trace", choices=tuple(_TRACE_LEVELS), default="none",
                        help="performance trace level (the simulated chip records none: logged; see perf_report)")
    parser.add_argument("-e", "--env", default="",
                        help='environment settings to run with, e.g. "PYBUDA_AMP_LIGHT=1 PYBUDA_GOLDEN_FAST" (=1)')
    parser.add_argument("--auto_transpose", action="store_true", help="enable auto-transposing placement")
    parser.add_argument("-di", "--dump_intermediate", default=None,
                        help="comma-separated op names whose outputs are saved (op_intermediates_to_save) and "
                             "written to intermediates_<tag>.npz in --output-dir")
    parser.add_argument("-dit", "--dump_intermediate_tag", default=None, help="file tag for --dump_intermediate")
    parser.add_argument("-dic", "--dump_intermediate_count", type=int, default=1,
                        help="inputs to dump with --dump_intermediate")
    parser.add_argument("--model_output", action="store_true",
                        help="write each microbatch's outputs to model_output_<model>_<config>.txt in --output-dir")
    parser.add_argument("-c", "--config", default=None,
                        help="model config/variant, e.g. tiny|base|large for bert (default per model)")
    parser.add_argument("--task", default=None,
                        help="model task, e.g. text_classification or encoder for bert ('na' = the default)")
    parser.add_argument("-mb", "--microbatch", type=int, default=64, help="microbatch size (default 64)")
    parser.add_argument("--loop_count", "--loop-count", dest="loop_count", type=int, default=4,
                        help="microbatches to run (default 4)")
    parser.add_argument("-df", "--dataformat", default="Fp16_b",
                        help="data format: Fp16, Fp16_b, Bfp8, Bfp8_b, ... or a DataFormat name (default Fp16_b)")
    parser.add_argument("-mf", "--math_fidelity", "--math-fidelity", dest="math_fidelity", default="HiFi3",
                        help="LoFi|HiFi2|HiFi3|HiFi4 (default HiFi3)")
    parser.add_argument("--device-config", "--device_config", dest="device_config", default="wh_n150",
                        choices=DEVICE_CONFIGS, help="card to compile for and model (default wh_n150)")
    parser.add_argument("--balancer-policy", "--balancer_policy", dest="balancer_policy", default="NLP",
                        help="balancer policy (default NLP, pybuda's own, as for compile; Ribbon reproduces the "
                             "published runs' placement)")
    parser.add_argument("--seq-len", "--seq_len", dest="seq_len", type=int, default=None,
                        help="sequence length for text/audio models (default per model)")
    parser.add_argument("--image-size", "--image_size", dest="image_size", type=int, default=None,
                        help="image size for vision models (default 224)")
    parser.add_argument("--perf-only", "--perf_only", dest="perf_only", action="store_true",
                        help="compile and model the card only; do not run the model (no numerics)")
    parser.add_argument("--save_output", "--save-output", dest="save_output", action="store_true",
                        help="write the result as JSON into --output-dir")
    parser.add_argument("--output-dir", "--output_dir", dest="output_dir", default=None,
                        help="where --save_output writes (default: the build directory)")
    parser.add_argument("--save_tti", "--save-tti", dest="save_tti", default=None, metavar="PATH",
                        help="compile to a device image at PATH (offline: nothing runs) and model the card")
    parser.add_argument("--load_tti", "--load-tti", dest="load_tti", default=None, metavar="PATH",
                        help="run the device image at PATH instead of compiling (random inputs of its shapes)")


@dataclass
class _Plan:
    model: str
    config: str
    task: Optional[str]
    size_kw: Dict[str, int]
    df: DataFormat
    mf: MathFidelity


def _plan(args: argparse.Namespace) -> _Plan:
    from pybuda.models import model_entry

    model = args.model
    if model not in MODELS:
        raise ConfigError(f"unknown model '{model}'; use one of {sorted(MODELS)}")
    entry = model_entry(model)
    config = args.config or MODELS[model]
    size_kw: Dict[str, int] = {}
    known = config in entry.variants or config in entry.aliases
    if config.isdigit() and entry.size_arg == "image_size" and not known:
        # benchmarking names some vision configs by their resolution (mobilenet_v2 -c 224); a variant
        # named by a number (vovnet_v2 -c 39) stays a variant
        size_kw["image_size"] = int(config)
        config = MODELS[model]
    if entry.size_arg == "seq_len":
        seq = args.seq_len or _DEFAULT_SEQ.get((model, config))
        if seq:
            size_kw["seq_len"] = int(seq)
    elif args.image_size or "image_size" not in size_kw:
        size_kw["image_size"] = int(args.image_size or size_kw.get("image_size", _DEFAULT_IMAGE.get(model, 224)))
    task = None if args.task in (None, "na", "") else args.task
    if args.microbatch < 1:
        raise ConfigError(f"--microbatch must be >= 1, got {args.microbatch}")
    if args.loop_count < 1:
        raise ConfigError(f"--loop_count must be >= 1, got {args.loop_count}")
    return _Plan(model, config, task, size_kw, parse_data_format(args.dataformat),
                 parse_math_fidelity(args.math_fidelity))


def _model(plan: _Plan, microbatch: int) -> Any:
    from pybuda.models import get_model

    kw: Dict[str, Any] = dict(plan.size_kw)
    if plan.task is not None:
        kw["task"] = plan.task
    return get_model(plan.model, plan.config, microbatch=microbatch, **kw)


def _compiler_config(plan: _Plan, args: argparse.Namespace) -> Any:
    from pybuda.config import AMPNodeProperties, CompilerConfig

    cfg = CompilerConfig(balancer_policy=args.balancer_policy, device_config=args.device_config,
                         default_df_override=plan.df, default_math_fidelity=plan.mf)
    if getattr(args, "acc_dataformat", None):
        cfg.default_accumulate_df = parse_data_format(args.acc_dataformat)
    if getattr(args, "backend_opt_level", None) is not None:
        cfg.backend_opt_level = args.backend_opt_level
    if getattr(args, "chips", 1) != 1:
        cfg.num_chips = args.chips
    cfg.performance_trace = _TRACE_LEVELS[getattr(args, "trace", "none") or "none"]
    if getattr(args, "auto_transpose", False):
        cfg.enable_auto_transposing_placement = True
    if getattr(args, "dump_intermediate", None):
        cfg.op_intermediates_to_save = [n.strip() for n in args.dump_intermediate.split(",") if n.strip()]
    if plan.model == "bert":
        # benchmarking's BERT ran exp in the SFPU's approximate mode (PYBUDA_EXP_APPROX)
        cfg.exp_approx = True
    if plan.model == "bert" and plan.df.is_bfp:
        # benchmarking's BERT kept these outputs at 16 bits when running in block float
        for op_type in ("add", "subtract", "reciprocal"):
            cfg.amp_properties.append(AMPNodeProperties(op_type=op_type, output_df=DataFormat.Float16_b))
    return cfg


def _run_cpu(spec: Any, loop_count: int, device: str = "cpu", outputs: Optional[list] = None) -> float:
    """Seconds for ``loop_count`` eager PyTorch forwards of one microbatch on ``device`` (cpu or cuda)."""
    import torch

    module = spec.module.to(device)
    inputs = [t.to(device) if isinstance(t, torch.Tensor) else t for t in spec.example_inputs]
    with torch.no_grad():
        module(*inputs)  # warm-up, as benchmarking did
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(loop_count):
            out = module(*inputs)
            if outputs is not None:
                outputs.append(out)
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0


def check_flags(args: argparse.Namespace) -> None:
    """ConfigError for a benchmarking flag pybuda cannot honour (:data:`FLAG_RULES`) or a bad combination."""
    given = {"--recompute": getattr(args, "recompute", False) and not getattr(args, "training", False),
             "--num_tokens": getattr(args, "num_tokens", 1) != 1}
    for flag, on in given.items():
        if on:
            raise ConfigError(f"{flag} is not supported: {FLAG_RULES[flag]}")
    dumping = getattr(args, "dump_intermediate", None) is not None
    if not dumping and (getattr(args, "dump_intermediate_tag", None) is not None
                        or getattr(args, "dump_intermediate_count", 1) != 1):
        raise ConfigError("--dump_intermediate_tag/--dump_intermediate_count only apply with --dump_intermediate")
    if dumping and (getattr(args, "perf_only", False) or getattr(args, "save_tti", None) or getattr(args, "load_tti", None)
                    or getattr(args, "training", False) or getattr(args, "device", "tt") != "tt"):
        raise ConfigError("--dump_intermediate needs an inference run on the device (-d tt): not with --perf-only, "
                          "--save_tti, --load_tti or -t")
    if dumping and getattr(args, "dump_intermediate_count", 1) < 1:
        raise ConfigError("--dump_intermediate_count must be >= 1")
    if getattr(args, "model_output", False) and (getattr(args, "perf_only", False) or getattr(args, "save_tti", None)):
        raise ConfigError("--model_output needs a run: not with --perf-only or --save_tti (nothing runs)")
    if getattr(args, "chips", 1) < 1:
        raise ConfigError(f"--chips must be >= 1, got {args.chips}")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ConfigError("-d cuda: no CUDA device is available to PyTorch on this host; use -d cpu or -d tt")
    if getattr(args, "model", None) is None:
        raise ConfigError("-m/--model is required (pybuda benchmark -l lists the models)")


def apply_env_flag(text: str) -> Dict[str, str]:
    """benchmarking's ``-e "A=1 B=2 C"``: set each variable in this process (a bare name means ``=1``);
    returns what was set. ConfigError for an empty name."""
    settings: Dict[str, str] = {}
    for item in (text or "").split():
        name, _, value = item.partition("=")
        if not name:
            raise ConfigError(f"-e/--env: '{item}' has no variable name")
        settings[name] = value if "=" in item else "1"
    from pybuda.config import set_env

    set_env(settings)
    return settings


def list_models() -> str:
    """``-l``: the models and their default configs."""
    return "\n".join(f"  {m.ljust(16)} default config: {c}" for m, c in sorted(MODELS.items()))


def _write_model_output(record: Dict[str, Any], outputs: list, out_dir: Path) -> Path:
    """``--model_output``: each microbatch's outputs, as text, in ``out_dir``."""
    import torch

    from pybuda.paths import path_inside, safe_file_name

    out_dir.mkdir(parents=True, exist_ok=True)
    name = safe_file_name("model_output_{}_{}".format(record["model"], record["config"]))
    path = Path(path_inside(out_dir, f"{name}.txt"))
    with torch.no_grad(), open(path, "w", encoding="utf-8") as f:
        for i, out in enumerate(outputs):
            items = out if isinstance(out, (list, tuple)) else [out]
            for j, t in enumerate(items):
                if not isinstance(t, torch.Tensor) and callable(getattr(t, "value", None)):
                    t = t.value()  # pybuda.Tensor
                f.write(f"microbatch {i} output {j}: {t!r}\n")
    return path


def _write_intermediates(record: Dict[str, Any], tag: Optional[str], items: list, out_dir: Path) -> Path:
    """``--dump_intermediate``: the saved op outputs as ``intermediates_<tag>.npz`` (arrays named
    ``<input index>.<op name>``; numpy's format, read back with ``allow_pickle=False``)."""
    import numpy as np

    from pybuda.paths import path_inside, safe_file_name

    out_dir.mkdir(parents=True, exist_ok=True)
    name = safe_file_name("intermediates_{}".format(tag or "{}_{}".format(record["model"], record["config"])))
    path = Path(path_inside(out_dir, f"{name}.npz"))
    arrays = {}
    for i, item in enumerate(items):
        for op_name, tensor in zip(item.names, item):
            value = tensor.value() if callable(getattr(tensor, "value", None)) else tensor
            arrays[f"{i}.{op_name}"] = value.detach().float().numpy()
    np.savez(path, **arrays)
    return path


def _compile_only(spec: Any, cfg: Any, microbatch: int) -> Tuple[Any, float]:
    """Capture one sample and compile it at ``microbatch`` without numerics: no input values reach the
    compiler, so it skips the golden and compiled-graph CPU runs. Returns (CompileResults, seconds)."""
    import torch

    from pybuda.compile import compile_graph

    sample = tuple(t[:1] if isinstance(t, torch.Tensor) and t.dim() else t for t in spec.example_inputs)
    t0 = time.perf_counter()
    graph = spec.to_pybuda().to_graph(*sample, graph_name=spec.full_name).graph
    graph.microbatch = microbatch
    results = compile_graph(graph, cfg.device_config, cfg, None, microbatch)
    return results, time.perf_counter() - t0


def _training_record(record: Dict[str, Any], spec: Any, cfg: Any, microbatch: int, recompute: bool) -> Dict[str, Any]:
    """``-t``: compile the model's forward and backward programs and an Adam optimizer program (TT-Buda's
    benchmark default) without running them, merge them into the one training netlist a TTDevice runs, and
    model a training step on the card."""
    import torch

    from pybuda.optimizers import Adam
    from pybuda.runtime.training import model_training

    cfg.enable_recompute = recompute
    sample = tuple(t[:1] if isinstance(t, torch.Tensor) and t.dim() else t for t in spec.example_inputs)
    t0 = time.perf_counter()
    graph = spec.to_pybuda().to_graph(*sample, graph_name=spec.full_name).graph
    _, perf = model_training(spec.full_name, graph, Adam(learning_rate=1e-4), device_desc=cfg.device_config,
                             config=cfg, microbatch=microbatch)
    compile_seconds = time.perf_counter() - t0
    record.update(training=True, recompute=recompute, compile_seconds=compile_seconds, epochs=perf.epochs,
                  modeled_training_samples_per_sec=perf.samples_per_sec, _summary=perf.summary())
    return record


def _compile_and_run(spec: Any, cfg: Any, device_config: str, loop_count: int,
                     outputs: Optional[list] = None, intermediates: Optional[list] = None,
                     intermediate_count: int = 1) -> Tuple[Any, float, float]:
    """Compile through the runtime (TTDevice on the simulated chip) and time ``loop_count`` microbatches
    from the first push to the last output. Returns (CompileResults, compile seconds, run seconds).
    With ``intermediates``, the saved intermediates of the first ``intermediate_count`` inputs are appended
    to it after the timed run."""
    from pybuda.arch import get_device_descriptor
    from pybuda.config import _set_global_compiler_config
    from pybuda.runtime import TTDevice, get_intermediates_queue, initialize_pipeline, pybuda_reset

    pybuda_reset()
    _set_global_compiler_config(cfg)
    try:
        desc = get_device_descriptor(device_config=device_config)
        tt = TTDevice("tt0", arch=desc.arch, module=spec.to_pybuda())
        inputs = tuple(spec.example_inputs)
        t0 = time.perf_counter()
        out_q = initialize_pipeline(training=False, sample_inputs=inputs)
        compile_seconds = time.perf_counter() - t0
        results = (tt.get_compiled_results() or [None])[0]
        run_seconds = _time_pushes(tt, inputs, loop_count, out_q, outputs)
        if intermediates is not None:
            queue = get_intermediates_queue()
            intermediates.extend(queue.get() for _ in range(min(intermediate_count, loop_count)))
        return results, compile_seconds, run_seconds
    finally:
        pybuda_reset()


def _time_pushes(device: Any, inputs: Tuple[Any, ...], loop_count: int, out_q: Any,
                 outputs: Optional[list] = None) -> float:
    """Seconds from the first of ``loop_count`` pushes to the last output, as benchmarking's harness timed
    (each output appended to ``outputs`` when given)."""
    from pybuda.runtime import run_forward

    t0 = time.perf_counter()
    for _ in range(loop_count):
        device.push_to_inputs(inputs)
    run_forward(input_count=loop_count)
    for _ in range(loop_count):
        out = out_q.get()
        if outputs is not None:
            outputs.append(out)
    return time.perf_counter() - t0


def _save_image(spec: Any, cfg: Any, path: str) -> Tuple[Any, float, int]:
    """Compile to a device image at ``path`` without running. Returns (image, seconds, file size)."""
    import os

    from pybuda.config import _set_global_compiler_config
    from pybuda.runtime import TTDevice, pybuda_reset

    pybuda_reset()
    _set_global_compiler_config(cfg)
    try:
        from pybuda.arch import get_device_descriptor

        tt = TTDevice("tt0", arch=get_device_descriptor(device_config=cfg.device_config).arch, module=spec.to_pybuda())
        t0 = time.perf_counter()
        image = tt.compile_to_image(img_path=path, sample_inputs=tuple(spec.example_inputs))
        return image, time.perf_counter() - t0, os.path.getsize(path)
    finally:
        pybuda_reset()


def _run_image(path: str, loop_count: int, outputs: Optional[list] = None) -> Tuple[Any, float, float]:
    """Load the device image at ``path`` and time ``loop_count`` pushes of random inputs of its shapes, from
    the first push to the last output. Returns (image, load seconds, run seconds)."""
    from pybuda.runtime import TTDevice, initialize_pipeline, pybuda_reset
    from pybuda.tti import TTDeviceImage
    from pybuda.tti.load import random_inputs

    pybuda_reset()
    try:
        t0 = time.perf_counter()
        image = TTDeviceImage.load_from_disk(path)
        tt = TTDevice.load_image(img=image)
        inputs = tuple(random_inputs(image))
        out_q = initialize_pipeline(training=False, sample_inputs=inputs)
        load_seconds = time.perf_counter() - t0
        return image, load_seconds, _time_pushes(tt, inputs, loop_count, out_q, outputs)
    finally:
        pybuda_reset()


def _image_record(record: Dict[str, Any], image: Any, loops: int, out_dir: Path) -> Dict[str, Any]:
    from pybuda.perf.report import write_reports
    from pybuda.tti.load import estimate_image, image_build

    report = estimate_image(image)[0]
    paths = write_reports(report, out_dir, routes=image_build(image))
    record.update(_perf_fields(report, loops, paths), device_config=image.device.name,
                  microbatch=image.microbatch_size)
    record["_summary"] = report.summary()
    return record


def _perf_fields(report: Any, loops: int, paths: Mapping[str, Any]) -> Dict[str, Any]:
    return {
        "epochs": report.num_epochs, "modeled_samples_per_sec": report.samples_per_sec,
        "modeled_samples_per_sec_loop": report.samples_per_sec_for(loops),
        "modeled_latency_ms": report.latency_s * 1e3, "modeled_math_utilization": report.math_utilization,
        "modeled_tflops": report.tflops,
        "bottleneck_op": report.bottleneck.name if report.bottleneck else None,
        "limited_by": report.limited_by,
        "perf_report": {k: str(v) for k, v in paths.items()},
    }


def run(args: argparse.Namespace) -> Dict[str, Any]:
    """Run the benchmark described by ``args``; returns the result record (also printed by :func:`main`)."""
    if getattr(args, "env", ""):
        apply_env_flag(args.env)  # before any config is made: PYBUDA_* variables apply to it
    check_flags(args)
    outputs: Optional[list] = [] if getattr(args, "model_output", False) else None
    if getattr(args, "save_tti", None) and getattr(args, "load_tti", None):
        raise ConfigError("--save_tti and --load_tti exclude each other: save an image in one run, load it in another")
    if args.device != "tt" and (getattr(args, "save_tti", None) or getattr(args, "load_tti", None)):
        raise ConfigError("--save_tti/--load_tti need -d tt")
    plan = _plan(args)
    mb, loops = int(args.microbatch), int(args.loop_count)
    record: Dict[str, Any] = {
        "model": plan.model, "config": plan.config, "task": plan.task, "device": args.device,
        "device_config": args.device_config if args.device == "tt" else None, "microbatch": mb,
        "loop_count": loops, "data_format": plan.df.name, "math_fidelity": plan.mf.name,
        "balancer_policy": args.balancer_policy if args.device == "tt" else None, **plan.size_kw,
        "compile_seconds": None, "epochs": None, "modeled_samples_per_sec": None,
        "modeled_samples_per_sec_loop": None, "modeled_latency_ms": None, "host_samples_per_sec": None,
        "perf_only": bool(args.perf_only), "chips": getattr(args, "chips", 1),
    }
    if getattr(args, "load_tti", None):
        from pybuda.config import build_dir

        image, load_seconds, run_seconds = _run_image(args.load_tti, loops, outputs)
        record.update(load_tti=args.load_tti, image_load_seconds=load_seconds,
                      host_samples_per_sec=image.microbatch_size * loops / run_seconds)
        if outputs is not None:
            record["model_output"] = str(_write_model_output(record, outputs, Path(args.output_dir or build_dir())))
        return _image_record(record, image, loops, Path(build_dir()))
    t_build = time.perf_counter()
    spec = _model(plan, mb)
    record["model_build_seconds"] = time.perf_counter() - t_build
    if args.device in ("cpu", "cuda"):
        seconds = _run_cpu(spec, loops, args.device, outputs)
        record["host_samples_per_sec"] = mb * loops / seconds
        if outputs is not None:
            from pybuda.config import build_dir

            record["model_output"] = str(_write_model_output(record, outputs, Path(args.output_dir or build_dir())))
        return record

    from pybuda.perf.model import estimate_compiled
    from pybuda.perf.report import write_reports
    from pybuda.config import build_dir

    cfg = _compiler_config(plan, args)
    if getattr(args, "save_tti", None):
        image, compile_seconds, size = _save_image(spec, cfg, args.save_tti)
        record.update(save_tti=args.save_tti, image_bytes=size, compile_seconds=compile_seconds)
        return _image_record(record, image, loops, Path(cfg.backend_output_dir or build_dir()))
    if getattr(args, "training", False):
        return _training_record(record, spec, cfg, mb, bool(getattr(args, "recompute", False)))
    if args.perf_only:
        results, compile_seconds = _compile_only(spec, cfg, mb)
        run_seconds = None
    else:
        intermediates: Optional[list] = [] if getattr(args, "dump_intermediate", None) else None
        results, compile_seconds, run_seconds = _compile_and_run(
            spec, cfg, args.device_config, loops, outputs, intermediates,
            int(getattr(args, "dump_intermediate_count", 1)))
        if intermediates is not None:
            record["intermediates"] = str(_write_intermediates(
                record, getattr(args, "dump_intermediate_tag", None), intermediates,
                Path(args.output_dir or cfg.backend_output_dir or build_dir())))
    if results is None or results.netlist is None:
        raise ConfigError("the compile produced no netlist to model")
    report = estimate_compiled(results, microbatch=mb)
    out_dir = Path(cfg.backend_output_dir or build_dir())
    paths = write_reports(report, out_dir)
    record.update(_perf_fields(report, loops, paths), compile_seconds=compile_seconds)
    if run_seconds is not None:
        record["host_samples_per_sec"] = mb * loops / run_seconds
    if outputs is not None:
        record["model_output"] = str(_write_model_output(record, outputs, Path(args.output_dir or out_dir)))
    record["_summary"] = report.summary()
    return record


def _print(record: Dict[str, Any]) -> None:
    what = f"{record['model']} {record['config']}"
    if record.get("task"):
        what += f" ({record['task']})"
    print(f"pybuda benchmark: {what}, microbatch {record['microbatch']}, {record['data_format']}/"
          f"{record['math_fidelity']}, device {record['device']}"
          + (f" {record['device_config']}" if record.get("device_config") else ""))
    if record.get("compile_seconds") is not None:
        print(f"  compile: {record['compile_seconds']:.1f} s, {record['epochs']} epoch(s)")
    if record.get("save_tti"):
        print(f"  device image: {record['save_tti']} ({record['image_bytes']:,} bytes); nothing ran (offline compile)")
    if record.get("load_tti"):
        print(f"  device image: {record['load_tti']} loaded and ready in {record['image_load_seconds']:.2f} s, "
              f"{record['epochs']} epoch(s)")
    if record.get("host_samples_per_sec") is not None:
        where = "simulated chip on this host" if record["device"] == "tt" else "PyTorch on this host"
        print(f"  measured host throughput ({where}): {record['host_samples_per_sec']:,.2f} samples/s")
    elif record["device"] == "tt" and not record.get("training"):
        print("  measured host throughput: skipped (--perf-only)")
    if record.get("modeled_training_samples_per_sec") is not None:
        print(f"  modeled card training throughput ({record['device_config']}): "
              f"{record['modeled_training_samples_per_sec']:,.1f} samples/s (forward + backward + Adam per "
              f"microbatch; the loop is not run on the simulated chip)")
        print(f"  {record['_summary']}")
    if record.get("modeled_samples_per_sec") is not None:
        print(f"  modeled card throughput ({record['device_config']}): {record['modeled_samples_per_sec']:,.1f} "
              f"samples/s steady state, {record['modeled_samples_per_sec_loop']:,.1f} samples/s over "
              f"{record['loop_count']} microbatch(es); latency {record['modeled_latency_ms']:.2f} ms per microbatch; "
              f"math utilisation {record['modeled_math_utilization']:.1%} ({record['modeled_tflops']:.1f} TFLOP/s), "
              f"limited by the {record['limited_by']}")
        print(f"  performance report: {record['perf_report']['html']}")
    if record.get("_summary"):
        log.info("%s", record["_summary"])


def main(args: argparse.Namespace) -> int:
    """Entry point of ``pybuda benchmark``; returns the exit status."""
    if getattr(args, "list", False):
        print("pybuda benchmark models:\n" + list_models())
        return 0
    record = run(args)
    _print(record)
    if args.save_output:
        from pybuda.config import build_dir

        out = Path(args.output_dir or build_dir())
        out.mkdir(parents=True, exist_ok=True)
        name = f"benchmark_{record['model']}_{record['config']}_{record['device_config'] or 'cpu'}_mb{record['microbatch']}"
        # The model and config names are user-given: one file-name component, inside the output folder.
        from pybuda.paths import path_inside, safe_file_name

        path = Path(path_inside(out, f"{safe_file_name(name)}.json"))
        data = {k: v for k, v in record.items() if not k.startswith("_")}
        path.write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
        print(f"  saved: {path}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    import sys

    p = argparse.ArgumentParser(prog="pybuda benchmark")
    add_arguments(p)
    sys.exit(main(p.parse_args()))
