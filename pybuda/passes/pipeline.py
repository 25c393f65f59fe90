"""The compile pipeline: TT-Buda's CompileDepth stages in order, and the compile entry points.

``STAGES`` below is the whole compiler at a glance: one function per :class:`CompileDepth` stage, run in
order until ``config.compile_depth`` (inclusive; ``FULL`` runs them all). Each stage reads and writes
the :class:`_State`; any exception a stage raises that is not already a :class:`CompileError` is wrapped
in one that names the stage.

Entry points:

- :func:`compile_graph` compiles an ``ir.Graph`` (the runtime calls it with a graph traced for one sample
  and ``graph.microbatch`` set);
- :func:`pybuda_compile` is TT-Buda's signature for a PyBudaModule / PyTorchModule (or a TTDevice holding
  one) and its sample inputs.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from pybuda.config import CompileDepth, CompilerConfig, _get_global_compiler_config
from pybuda.errors import CompileError, PybudaError
from pybuda.ir.graph import Graph
from pybuda.ir.lowered import BudaGraph
from pybuda.passes.context import CompileContext

log = logging.getLogger(__name__)


@dataclass
class CompileSummary:
    """What the compile produced, in numbers."""

    graph_name: str
    device: str
    arch: str
    ir_ops: int = 0
    lowered_ops: int = 0
    fused_ops: int = 0
    queues: int = 0
    epochs: int = 0
    cores_per_epoch: List[int] = field(default_factory=list)
    ops_per_epoch: List[int] = field(default_factory=list)
    epoch_to_epoch_queues: int = 0
    balancer_policy: str = ""
    compile_seconds: float = 0.0

    def to_dict(self) -> Dict[str, Any]:
        """The summary as a JSON-friendly dict."""
        return dict(self.__dict__)

    def __str__(self) -> str:
        cores = self.cores_per_epoch
        lines = [f"graph '{self.graph_name}' on {self.device} ({self.arch}): {self.ir_ops} IR ops -> "
                 f"{self.lowered_ops} device ops ({self.fused_ops} fused), {self.queues} queues",
                 f"{self.epochs} epoch(s), {self.epoch_to_epoch_queues} epoch-to-epoch queue(s), "
                 f"policy {self.balancer_policy}"]
        if cores:
            lines.append(f"cores per epoch: min {min(cores)}, max {max(cores)}, mean {sum(cores) / len(cores):.1f} "
                         f"-> {cores if len(cores) <= 16 else str(cores[:16])[:-1] + ', ...]'}")
        lines.append(f"compile time {self.compile_seconds:.2f} s")
        return "\n".join(lines)


@dataclass
class CompileResults:
    """Everything a compile produced (TT-Buda's CompileResults, plus the intermediate objects).

    ``outputs`` are the compiled graph's outputs on the CPU reference (the lowered graph once it exists)
    and ``golden_outputs`` the initial graph's, both only when the inputs had values.
    """

    initial_graph: Optional[Graph] = None
    graph: Optional[Graph] = None  # the last IR graph (per sample, before lowering)
    lowered_graph: Optional[BudaGraph] = None
    balancer_solution: Any = None
    placer_solution: Any = None
    netlist: Any = None
    netlist_filename: Optional[str] = None
    config: Optional[CompilerConfig] = None
    device: Any = None
    microbatch: int = 1
    compile_depth: CompileDepth = CompileDepth.INIT_COMPILE
    stage_timings: Dict[str, float] = field(default_factory=dict)
    outputs: List[torch.Tensor] = field(default_factory=list)
    golden_outputs: List[torch.Tensor] = field(default_factory=list)
    summary: Optional[CompileSummary] = None
    input_host_tms: Dict[str, list] = field(default_factory=dict)
    output_host_tms: Dict[str, list] = field(default_factory=dict)
    consteval_trace: Dict[str, Any] = field(default_factory=dict)
    artifacts: Dict[str, str] = field(default_factory=dict)
    notes: Dict[str, Any] = field(default_factory=dict)

    @property
    def lowered(self) -> Optional[BudaGraph]:
        """Alias of ``lowered_graph``."""
        return self.lowered_graph

    @property
    def pass_specific_output_kwargs(self) -> Dict[str, Any]:
        """TT-Buda's extra outputs: placer solution, output host TMs and consteval trace."""
        return {"placer_solution": self.placer_solution, "output_host_tms": self.output_host_tms,
                "consteval_trace": self.consteval_trace}


@dataclass
class _State:
    graph: Graph
    ctx: CompileContext
    verify_cfg: Any
    inputs: Optional[List[torch.Tensor]]
    results: CompileResults
    bg: Optional[BudaGraph] = None


# --- stages ------------------------------------------------------------------------------------------------


def _init_compile(s: _State) -> None:
    cfg = s.ctx.config
    if cfg.enable_training:
        raise s.ctx.error("training compiles (autograd) are not supported yet; compile with enable_training=False")
    if s.ctx.microbatch < 1:
        raise s.ctx.error(f"microbatch must be >= 1, got {s.ctx.microbatch}")


def _generate_initial_graph(s: _State) -> None:
    for node in s.graph.inputs + s.graph.outputs:
        node.tags.setdefault("framework_shape", tuple(node.shape))
    s.results.initial_graph = s.graph.copy()
    _check_override_names(s)
    if s.inputs is not None and _has_values(s.inputs):
        from pybuda.verify import run_graph_on_cpu

        s.results.golden_outputs = [t.detach() for t in run_graph_on_cpu(s.graph, s.inputs)]


def _post_initial_graph(s: _State) -> None:
    from pybuda.passes.graph.channel_last import convert_convs_to_channel_last
    from pybuda.passes.graph.decompose import decompose_high_level_ops
    from pybuda.passes.graph.prestride import prestride_convs

    s.graph = decompose_high_level_ops(s.graph, s.ctx)
    s.graph = prestride_convs(s.graph, s.ctx)
    s.graph = convert_convs_to_channel_last(s.graph, s.ctx)


def _consteval(s: _State) -> None:
    if s.ctx.config.enable_consteval:
        from pybuda.passes.graph.consteval import evaluate_constants

        s.graph = evaluate_constants(s.graph, s.ctx)


def _pattern_matcher(s: _State) -> None:
    """Compacting isomorphic subgraphs (TT-Buda's looped graphs) is not done: nothing to do."""


def _optimize(s: _State) -> None:
    from pybuda.passes.graph.optimize_tms import optimize_tms

    s.graph = optimize_tms(s.graph, s.ctx)


def _autograd(s: _State) -> None:
    """Inference only: training stopped at INIT_COMPILE."""


def _post_autograd(s: _State) -> None:
    """Nothing to lower after autograd for inference."""


def _pre_lowering(s: _State) -> None:
    from pybuda.passes.graph.microbatch import strip_microbatch

    s.graph = strip_microbatch(s.graph, s.ctx)
    s.results.graph = s.graph


def _buda_graph_pre_placer(s: _State) -> None:
    from pybuda.passes.lowered.data_formats import set_data_formats
    from pybuda.passes.lowered.fuse_matmul_epilogue import fuse_matmul_epilogues
    from pybuda.passes.lowered.fuse_ops import fuse_elementwise_ops
    from pybuda.passes.lower.to_tiles import lower_to_buda

    bg = lower_to_buda(s.graph, s.ctx)
    bg = fuse_matmul_epilogues(bg, s.ctx)
    bg = set_data_formats(bg, s.ctx)
    bg = fuse_elementwise_ops(bg, s.ctx)
    s.bg = bg
    s.results.lowered_graph = bg


def _balance_and_place(s: _State) -> None:
    from pybuda.balancer import balance
    from pybuda.placer import place

    multiplier = max(2, int(s.ctx.microbatch_count))
    s.results.balancer_solution = balance(s.bg, s.ctx.device, s.ctx.config)
    s.results.placer_solution = place(s.bg, s.results.balancer_solution, s.ctx.device, s.ctx.config,
                                      io_queue_multiplier=multiplier)


def _pre_netlist(s: _State) -> None:
    s.results.consteval_trace = dict(s.ctx.consteval_trace)


def _generate_netlist(s: _State) -> None:
    from pybuda.passes.artifacts import write_artifacts
    from pybuda.netlist import validate
    from pybuda.netlist.generate import generate_netlist

    netlist = generate_netlist(s.bg, s.results.balancer_solution, s.results.placer_solution, s.ctx)
    s.results.netlist = netlist
    try:
        validate(netlist, s.ctx.device)
    except PybudaError as e:
        raise s.ctx.error(f"the generated netlist is invalid (a compiler bug): {e}") from e
    s.results.artifacts = write_artifacts(s.results, s.ctx)
    s.results.netlist_filename = s.results.artifacts.get("netlist")


def _backend_golden_verify(s: _State) -> None:
    """With ``verify_cfg.run_golden`` and sample inputs: run the netlist on the golden backend (plain
    float32 when ``verify_cfg.golden_ignore_df_precision``, else the chip's formats and fidelity) on the
    first inputs and compare each output with the model's (``compare_tensor_to_golden``: PCC, relative
    atol, per-dtype rtol/atol of ``verify_cfg``); a mismatch is a CompileError naming the output."""
    if s.verify_cfg is None or not getattr(s.verify_cfg, "run_golden", False):
        return
    if s.inputs is None or not _has_values(s.inputs) or not s.results.golden_outputs:
        log.warning("BACKEND_GOLDEN_VERIFY: no sample inputs with values; skipped")
        return
    from pybuda.golden.executor import GoldenExecutor
    from pybuda.verify import calculate_pcc, compare_tensor_to_golden

    vcfg = s.verify_cfg
    fast = bool(getattr(vcfg, "golden_ignore_df_precision", True)) or bool(s.ctx.config.golden_ignore_df_precision)
    s.results.consteval_trace = dict(s.ctx.consteval_trace)
    outs = GoldenExecutor(s.results, microbatch=s.ctx.microbatch, fast=fast).run(s.inputs)
    s.ctx.notes["backend_golden_outputs"] = outs
    names = [n.name for n in s.results.initial_graph.outputs] if s.results.initial_graph is not None else []
    for i, (golden, got) in enumerate(zip(s.results.golden_outputs, outs)):
        name = names[i] if i < len(names) else f"output {i}"
        if not compare_tensor_to_golden(f"golden backend {name}", golden, got, verify_cfg=vcfg):
            got_pcc = calculate_pcc(golden.to(torch.float32), got.reshape(golden.shape).to(torch.float32)) \
                if got.numel() == golden.numel() else float("nan")
            mode = "float32" if fast else "chip formats and fidelity"
            raise CompileError(f"output {i} ('{name}') of the netlist on the golden backend ({mode}) does not match "
                               f"the model: PCC {got_pcc:.6f}, required {vcfg.pcc} (and not allclose with "
                               f"relative_atol {vcfg.relative_atol})", stage="BACKEND_GOLDEN_VERIFY")


#: The compiler, stage by stage (TT-Buda's CompileDepth order).
STAGES: List[Tuple[CompileDepth, Callable[[_State], None]]] = [
    (CompileDepth.INIT_COMPILE, _init_compile),
    (CompileDepth.GENERATE_INITIAL_GRAPH, _generate_initial_graph),
    (CompileDepth.POST_INITIAL_GRAPH_PASS, _post_initial_graph),
    (CompileDepth.CONSTEVAL_GRAPH, _consteval),
    (CompileDepth.POST_PATTERN_MATCHER, _pattern_matcher),
    (CompileDepth.OPTIMIZED_GRAPH, _optimize),
    (CompileDepth.AUTOGRAD, _autograd),
    (CompileDepth.POST_AUTOGRAD_PASS, _post_autograd),
    (CompileDepth.PRE_LOWERING_PASS, _pre_lowering),
    (CompileDepth.BUDA_GRAPH_PRE_PLACER, _buda_graph_pre_placer),
    (CompileDepth.BALANCER_PASS, _balance_and_place),
    (CompileDepth.PRE_NETLIST_PASS, _pre_netlist),
    (CompileDepth.GENERATE_NETLIST, _generate_netlist),
    (CompileDepth.BACKEND_GOLDEN_VERIFY, _backend_golden_verify),
]


# --- entry points --------------------------------------------------------------------------------------------


def _descriptor(config: CompilerConfig, arch: Any = None, device_config: Optional[str] = None,
                num_chips: Optional[int] = None):
    """A device descriptor with the config's harvesting: ``harvested_rows`` (NoC rows, TT-Buda's option)
    become a mask only once the arch is known; otherwise ``harvesting_mask`` applies."""
    from pybuda.arch import get_device_descriptor

    chips = config.num_chips if num_chips is None else num_chips
    if not config.harvested_rows:
        return get_device_descriptor(arch, device_config=device_config, harvesting_mask=config.harvesting_mask,
                                     num_chips=chips)
    base = get_device_descriptor(arch, device_config=device_config, num_chips=chips)
    return get_device_descriptor(arch, device_config=device_config,
                                 harvesting_mask=config.resolved_harvesting_mask(base.arch), num_chips=chips)


def resolve_device(device: Any, config: CompilerConfig):
    """A DeviceDescriptor from a descriptor, a preset/arch name, a BackendDevice or a TTDevice."""
    from pybuda.arch.types import BackendDevice

    if device is None:
        if config.device_config:
            return _descriptor(config, device_config=config.device_config)
        raise CompileError("no device to compile for: pass a device descriptor, a preset name (e.g. 'wh_n150') "
                           "or set device_config", stage="INIT_COMPILE")
    if hasattr(device, "grid_rows") and hasattr(device, "arch"):
        return device
    if isinstance(device, str):
        from pybuda.arch import PRESETS

        if device.lower() in PRESETS:
            return _descriptor(config, device_config=device.lower())
        return _descriptor(config, arch=device)
    if isinstance(device, BackendDevice):
        return _descriptor(config, arch=device, device_config=config.device_config)
    arch = getattr(device, "arch", None)
    if arch is not None:  # a TTDevice: its arch, with the config's card preset when it is of that arch
        chips = max(1, int(getattr(device, "num_chips", 1) or 1))
        try:
            return _descriptor(config, arch=arch, device_config=config.device_config, num_chips=chips)
        except PybudaError:
            return _descriptor(config, arch=arch, num_chips=chips)
    raise CompileError(f"cannot compile for {device!r}: expected a DeviceDescriptor, a preset name or a TTDevice",
                       stage="INIT_COMPILE")


def compile_graph(graph: Graph, device: Any, config: Optional[CompilerConfig] = None, verify_cfg: Any = None,
                  microbatch: int = 1, *, inputs: Optional[Sequence[torch.Tensor]] = None,
                  microbatch_count: int = 1) -> CompileResults:
    """Compile ``graph`` for ``device`` through the CompileDepth stages (up to ``config.compile_depth``).

    ``device``: a DeviceDescriptor, a preset name (``"gs_e150"``, ``"wh_n150"`` ...), an arch name or a
    BackendDevice. ``config`` defaults to the global CompilerConfig; it is snapshotted, so later edits do not
    affect this compile. ``microbatch``: samples per device run (graph inputs have dim 0 equal to it, or 1
    when traced for one sample). ``inputs`` (optional tensors in ``graph.inputs`` order) give golden and
    compiled CPU-reference outputs, checked against each other when ``verify_cfg`` asks for it.
    Raises CompileError naming the stage (and op) on failure.
    """
    start = time.perf_counter()
    cfg = (config if config is not None else _get_global_compiler_config()).snapshot()
    cfg.apply_env_config_overrides()
    dev = resolve_device(device, cfg)
    ctx = CompileContext(config=cfg, device=dev, microbatch=int(microbatch or getattr(graph, "microbatch", 1) or 1),
                         microbatch_count=int(microbatch_count), graph_name=graph.name)
    results = CompileResults(config=cfg, device=dev, microbatch=ctx.microbatch)
    state = _State(graph=graph.copy(), ctx=ctx, verify_cfg=verify_cfg,
                   inputs=list(inputs) if inputs is not None else None, results=results)
    state.graph.microbatch = ctx.microbatch
    for depth, fn in STAGES:
        if depth > cfg.compile_depth:
            break
        ctx.stage = depth.name
        t0 = time.perf_counter()
        try:
            fn(state)
        except CompileError as e:
            if e.stage is None:
                e.stage = depth.name
                e.args = (f"[stage {depth.name}] {e.args[0]}",) if e.args else e.args
            raise
        except PybudaError as e:
            raise CompileError(str(e), stage=depth.name) from e
        except Exception as e:
            raise CompileError(f"{type(e).__name__}: {e}", stage=depth.name) from e
        results.stage_timings[depth.name] = time.perf_counter() - t0
        results.compile_depth = depth
        if verify_cfg is not None and getattr(verify_cfg, "verify_all", False):
            _verify_stage(state, depth)
    if cfg.compile_depth >= CompileDepth.FULL:
        results.compile_depth = CompileDepth.FULL
    ctx.stage = ""
    results.graph = results.graph or state.graph
    results.input_host_tms = dict(ctx.input_host_tms)
    results.output_host_tms = dict(ctx.output_host_tms)
    results.consteval_trace = dict(ctx.consteval_trace)
    results.notes = dict(ctx.notes)
    _verify(state)
    results.summary = _summary(state, time.perf_counter() - start)
    return results


def _has_values(inputs: Sequence[Any]) -> bool:
    return all(isinstance(t, torch.Tensor) for t in inputs)


def _verify(s: _State) -> None:
    r = s.results
    if s.inputs is None or not _has_values(s.inputs) or not r.golden_outputs:
        return
    vcfg = s.verify_cfg
    if s.bg is not None:
        from pybuda.passes.lowered.buda_eval import evaluate_buda_graph

        feed = {name: t for name, t in zip(s.bg.input_order, s.inputs)}
        outs = evaluate_buda_graph(s.bg, feed)
        r.outputs = [outs[n] for n in s.bg.output_order]
    else:
        r.outputs = _run_ir(s.graph, s.inputs, s.ctx)
    if vcfg is None or not getattr(vcfg, "enabled", False) or not getattr(vcfg, "verify_last", True):
        return
    from pybuda.verify import compare_tensor_to_golden

    for i, (golden, got) in enumerate(zip(r.golden_outputs, r.outputs)):
        if not compare_tensor_to_golden(f"output {i}", golden, got, verify_cfg=vcfg):
            raise CompileError(f"output {i} of the compiled graph does not match the model (see the log for PCC)",
                               stage=r.compile_depth.name)


def _verify_stage(s: _State, depth: CompileDepth) -> None:
    """``verify_all``: after every graph stage, run the current graph on the CPU and compare with the model."""
    if s.inputs is None or not _has_values(s.inputs) or not s.results.golden_outputs:
        return
    if depth < CompileDepth.POST_INITIAL_GRAPH_PASS or depth > CompileDepth.BUDA_GRAPH_PRE_PLACER:
        return
    from pybuda.verify import compare_tensor_to_golden

    if depth == CompileDepth.BUDA_GRAPH_PRE_PLACER:
        from pybuda.passes.lowered.buda_eval import evaluate_buda_graph

        outs = evaluate_buda_graph(s.bg, {n: t for n, t in zip(s.bg.input_order, s.inputs)})
        outs = [outs[n] for n in s.bg.output_order]
    else:
        outs = _run_ir(s.graph, s.inputs, s.ctx)
    for i, (golden, got) in enumerate(zip(s.results.golden_outputs, outs)):
        if not compare_tensor_to_golden(f"{depth.name} output {i}", golden, got, verify_cfg=s.verify_cfg):
            raise CompileError(f"after {depth.name}, output {i} no longer matches the model (a compiler bug)",
                               stage=depth.name)


def _run_ir(graph: Graph, inputs: Sequence[torch.Tensor], ctx: CompileContext) -> List[torch.Tensor]:
    """Run an IR graph of any stage on the model's inputs (host TMs and microbatch split applied)."""
    from pybuda.netlist.host_io import apply_host_tms
    from pybuda.verify import run_graph_on_cpu

    feed = []
    for node, t in zip(graph.inputs, inputs):
        feed.append(apply_host_tms(t, node.tags.get("host_tms")))
    per_sample = graph.microbatch > 1 and any(tuple(n.shape) != tuple(f.shape) for n, f in zip(graph.inputs, feed))
    if per_sample:
        outs_per = [run_graph_on_cpu(graph, [f[i:i + 1] for f in feed]) for i in range(graph.microbatch)]
        outs = [torch.cat([o[k] for o in outs_per]) for k in range(len(outs_per[0]))]
    else:
        outs = run_graph_on_cpu(graph, feed)
    return [apply_host_tms(o, n.tags.get("host_tms")) for o, n in zip(outs, graph.outputs)]


def _summary(s: _State, seconds: float) -> CompileSummary:
    r = s.results
    dev = s.ctx.device
    summary = CompileSummary(graph_name=s.ctx.graph_name, device=str(getattr(dev, "name", dev)),
                             arch=s.ctx.arch_name, compile_seconds=seconds)
    summary.ir_ops = len(r.initial_graph.ops) if r.initial_graph is not None else len(s.graph.ops)
    if s.bg is not None:
        summary.lowered_ops = len(s.bg.ops)
        summary.fused_ops = sum(1 for op in s.bg.ops.values() if op.type == "fused_op")
        summary.queues = len(s.bg.queues)
    if r.balancer_solution is not None:
        summary.balancer_policy = r.balancer_solution.policy
    ps = r.placer_solution
    if ps is not None:
        summary.epochs = len(ps.epochs)
        summary.ops_per_epoch = [len(e.ops) for e in ps.epochs]
        summary.cores_per_epoch = [sum(ps.op_placements[o].grid_size[0] * ps.op_placements[o].grid_size[1]
                                       for o in e.ops) for e in ps.epochs]
        summary.epoch_to_epoch_queues = len(ps.epoch_to_epoch_queues)
        summary.queues += len(ps.epoch_to_epoch_queues)
    return summary


def _check_override_names(s: _State) -> None:
    """Warn about overrides naming ops the graph does not have (they may name lowered ops, so only warn)."""
    cfg = s.ctx.config
    names = set(s.graph.nodes)
    for name in list(cfg.balancer_op_overrides) + list(cfg.placer_op_overrides) + cfg.op_names_to_epoch_break:
        if name not in names and not any(n.startswith(name) for n in names):
            log.warning("override names '%s', which is not an op of graph '%s'", name, s.graph.name)


def pybuda_compile(dev_or_module: Any, graph_name: str, *inputs: Any, targets: Sequence[Any] = (),
                   compiler_cfg: Optional[CompilerConfig] = None, verify_cfg: Any = None, losses: Any = None,
                   microbatch_size: int = 1, microbatch_count: int = 1) -> CompileResults:
    """TT-Buda's direct compile entry point for a PyBudaModule / PyTorchModule (or a TTDevice holding one).

    ``inputs`` are sample tensors (dim 0 = ``microbatch_size``); the module is traced (PyBuda) or captured
    (PyTorch) with them and compiled for the device (a TTDevice's arch, else ``compiler_cfg.device_config``,
    else Grayskull e150). ``targets``/``losses`` are for training, which is not supported.
    """
    from pybuda.module import PyBudaModule, PyTorchModule

    cfg = compiler_cfg if compiler_cfg is not None else _get_global_compiler_config()
    if targets or losses:
        raise CompileError("targets/losses are for training compiles, which are not supported yet", stage="INIT_COMPILE")
    module, device = dev_or_module, None
    if not isinstance(dev_or_module, (PyBudaModule, PyTorchModule)):
        modules = getattr(dev_or_module, "modules", None)
        if not modules:
            raise CompileError(f"pybuda_compile: {dev_or_module!r} is neither a module nor a device holding one",
                               stage="INIT_COMPILE")
        module, device = modules[0], dev_or_module
    if device is None:
        device = cfg.device_config or "gs_e150"
    tensors = [t.value() if hasattr(t, "value") and callable(t.value) and not isinstance(t, torch.Tensor) else t
               for t in inputs]
    t0 = time.perf_counter()
    try:
        if isinstance(module, PyBudaModule):
            graph, _ = module.trace(*tensors, graph_name=graph_name)
        else:
            capture = module.to_graph(*tensors, graph_name=graph_name)
            graph = capture.graph
            if capture.pre is not None:  # ops split off to the CPU run before the device graph
                with torch.no_grad():
                    tensors = list(capture.pre(*capture.flatten_inputs(*tensors)))
    except CompileError:
        raise
    except PybudaError as e:
        raise CompileError(str(e), stage="GENERATE_INITIAL_GRAPH") from e
    trace_seconds = time.perf_counter() - t0
    graph.microbatch = microbatch_size
    results = compile_graph(graph, device, cfg, verify_cfg, microbatch_size, inputs=tensors,
                            microbatch_count=microbatch_count)
    results.stage_timings["GENERATE_INITIAL_GRAPH"] = results.stage_timings.get("GENERATE_INITIAL_GRAPH", 0.0) + \
        trace_seconds
    return results
