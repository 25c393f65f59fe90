"""The compile pipeline: TT-Buda's CompileDepth stages in order.

``STAGES`` below is the whole compiler at a glance: one function per :class:`CompileDepth` stage, run in
order until ``config.compile_depth`` (inclusive; ``FULL`` runs them all) by :func:`run_stages`. Each stage
reads and writes the :class:`_State`; any exception a stage raises that is not already a
:class:`CompileError` is wrapped in one that names the stage.

The entry points (``compile_graph``, ``pybuda_compile``) and ``CompileResults`` live in
:mod:`pybuda.compile`, which imports this module (never the other way round at import time).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, List, Optional, Sequence, Tuple

import torch

from pybuda.config import CompileDepth
from pybuda.errors import CompileError, ConfigError, PybudaError
from pybuda.ir.graph import Graph
from pybuda.ir.lowered import BudaGraph
from pybuda.ops.registry import memoized_inference
from pybuda.passes.context import CompileContext

if TYPE_CHECKING:  # pybuda.compile imports this module
    from pybuda.compile import CompileResults

log = logging.getLogger(__name__)


@dataclass
class _State:
    graph: Graph
    ctx: CompileContext
    verify_cfg: Any
    inputs: Optional[List[torch.Tensor]]
    results: CompileResults
    bg: Optional[BudaGraph] = None


#: Where a request for a training compile from the inference entry points is sent.
TRAINING_ROUTE = ("train through the runtime instead: a TTDevice with an optimizer and pybuda.run_training (or "
                  "initialize_pipeline(training=True)), which compiles the forward, backward and optimizer programs")


# --- stages ------------------------------------------------------------------------------------------------


def _init_compile(s: _State) -> None:
    cfg = s.ctx.config
    if cfg.enable_training:
        raise s.ctx.error("compile_graph compiles inference graphs (enable_training=False); " + TRAINING_ROUTE)
    if s.ctx.microbatch < 1:
        raise s.ctx.error(f"microbatch must be >= 1, got {s.ctx.microbatch}")


def _generate_initial_graph(s: _State) -> None:
    for node in s.graph.inputs + s.graph.outputs:
        node.tags.setdefault("framework_shape", tuple(node.shape))
    s.results.initial_graph = s.graph.copy()
    from pybuda.verify import verification_requested

    # The model's outputs on the CPU reference are the golden of every later check; without a check to
    # make, running the model would only cost time (as long as the compile, for a large model). A graph
    # traced for one sample runs the pushed microbatch sample by sample (_run_ir).
    if s.inputs is not None and _has_values(s.inputs) and verification_requested(s.verify_cfg):
        s.results.golden_outputs = [t.detach() for t in _run_ir(s.graph, s.inputs, s.ctx)]


def _post_initial_graph(s: _State) -> None:
    from pybuda.passes.graph.channel_last import convert_convs_to_channel_last
    from pybuda.passes.graph.decompose import decompose_high_level_ops
    from pybuda.passes.graph.fold_batchnorm import fold_batchnorms
    from pybuda.passes.graph.fold_pads import fold_pads
    from pybuda.passes.graph.fold_scales import fold_scales
    from pybuda.passes.graph.identities import drop_identity_ops
    from pybuda.passes.graph.prestride import prestride_convs

    s.graph = drop_identity_ops(s.graph, s.ctx)
    s.graph = fold_batchnorms(s.graph, s.ctx)  # before decompose, which would split the norm into scale and shift
    s.graph = fold_scales(s.graph, s.ctx)
    s.graph = decompose_high_level_ops(s.graph, s.ctx)
    s.graph = fold_pads(s.graph, s.ctx)
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
    from pybuda.passes.graph.mask_fills import hold_mask_fills, mark_fill_samples
    from pybuda.passes.graph.nonfinite import hold_nonfinite, mark_nonfinite_carriers, mark_nonfinite_samples

    s.graph = strip_microbatch(s.graph, s.ctx)
    s.graph = hold_nonfinite(s.graph, s.ctx)  # on the graph lowered: every op between a NaN and its test is there
    if s.inputs is not None and _has_values(s.inputs):
        mark_nonfinite_samples(s.graph, s.inputs)
        mark_fill_samples(s.graph, s.inputs)
    s.graph = mark_nonfinite_carriers(s.graph, s.ctx)  # after hold_nonfinite: what a test reads is carried
    s.graph = hold_mask_fills(s.graph, s.ctx)
    s.results.graph = s.graph


def _buda_graph_pre_placer(s: _State) -> None:
    from pybuda.passes.lowered.approximate_sfpu import mark_approximate_exp
    from pybuda.passes.lowered.data_formats import set_data_formats
    from pybuda.passes.lowered.exact_broadcast import exact_tile_broadcasts
    from pybuda.passes.lowered.exact_pickers import exact_pickers, exact_zero_padding
    from pybuda.passes.lowered.fuse_matmul_epilogue import fuse_matmul_epilogues
    from pybuda.passes.lowered.fuse_ops import fuse_elementwise_ops
    from pybuda.passes.lowered.lofi_weights import round_lofi_weights
    from pybuda.passes.lowered.overrides import apply_schedule_constraints, insert_nops, resolve_overrides
    from pybuda.passes.lower.to_tiles import lower_to_buda

    bg = lower_to_buda(s.graph, s.ctx)
    for op in bg.ops.values():
        op.epoch_type = s.ctx.epoch_type  # a backward or optimizer compile: its own epochs and program
    framework_names = set(s.graph.nodes) | (set(s.results.initial_graph.nodes) if s.results.initial_graph else set())
    bg = resolve_overrides(bg, s.ctx, framework_names)
    bg = insert_nops(bg, s.ctx)
    bg = fuse_matmul_epilogues(bg, s.ctx)
    bg = set_data_formats(bg, s.ctx)
    bg = exact_zero_padding(bg, s.ctx)  # after formats, before fusion: Float32 padding zeroed without truncation
    bg = fuse_elementwise_ops(bg, s.ctx)
    bg = exact_tile_broadcasts(bg, s.ctx)  # after formats and fusion: the tile broadcasts fusion left
    bg = exact_pickers(bg, s.ctx)  # after formats: Float32 data a picker would truncate is copied in pieces
    bg = mark_approximate_exp(bg, s.ctx)
    bg = round_lofi_weights(bg, s.ctx)
    bg = apply_schedule_constraints(bg, s.ctx)
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
    from pybuda.netlist.generate import generate_netlist, program_name
    from pybuda.netlist.host_io import build_host_io

    netlist = generate_netlist(s.bg, s.results.balancer_solution, s.results.placer_solution, s.ctx)
    s.results.netlist = netlist
    # With the netlist, the host side as plain data: together with the tensors, all a backend reads.
    s.results.host_io = build_host_io(s.bg, s.results.initial_graph, s.ctx.consteval_trace, s.ctx.microbatch,
                                      program=program_name(s.ctx.epoch_type))
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
    from pybuda.golden.executor import GoldenExecutor, executor_inputs, golden_numerics
    from pybuda.verify import calculate_pcc, compare_tensor_to_golden

    vcfg = s.verify_cfg
    numerics = golden_numerics(s.ctx.config)
    numerics["fast"] = numerics["fast"] or bool(getattr(vcfg, "golden_ignore_df_precision", True))
    netlist, host_io, tensors = executor_inputs(s.results)
    outs = GoldenExecutor(netlist, host_io, tensors, **numerics).run(s.inputs)
    s.ctx.notes["backend_golden_outputs"] = outs
    names = [n.name for n in s.results.initial_graph.outputs] if s.results.initial_graph is not None else []
    for i, (golden, got) in enumerate(zip(s.results.golden_outputs, outs)):
        name = names[i] if i < len(names) else f"output {i}"
        if not compare_tensor_to_golden(f"golden backend {name}", golden, got, verify_cfg=vcfg):
            got_pcc = calculate_pcc(golden.to(torch.float32), got.reshape(golden.shape).to(torch.float32)) \
                if got.numel() == golden.numel() else float("nan")
            mode = "float32" if numerics["fast"] else "chip formats and fidelity"
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


# --- running the stages --------------------------------------------------------------------------------------

#: Stages that may run the whole model on the CPU (its golden outputs; the netlist on the golden backend):
#: they keep torch's intra-op threads. See :func:`_one_torch_thread`.
_RUNS_THE_MODEL = frozenset({CompileDepth.GENERATE_INITIAL_GRAPH, CompileDepth.BACKEND_GOLDEN_VERIFY})


@contextlib.contextmanager
def _one_torch_thread(active: bool = True) -> Iterator[None]:
    """torch on one intra-op thread meanwhile (when ``active``), its thread count restored afterwards.

    The compiler's own tensors are small: index maps of a reshape chain, a weight scaled by a folded
    constant. Split over threads, each such op saves microseconds and pays a fork/join, and on a busy
    machine the join waits for a thread the OS has not scheduled: a 1024x1024 multiply took 10 ms instead
    of 0.1 ms, and BERT-Large's consteval and lowering 0.75 s with torch's 2 threads against 0.2 s with one
    on a loaded 2-core machine. One thread also makes what the compile computes independent of the
    caller's thread count (netlists and folded tensors of the zoo models are the same either way).
    A compile outside the main thread leaves the count alone (it is process-wide).
    """
    threads = torch.get_num_threads()
    # The count is process-wide: only the main thread changes it, so that devices compiling in worker
    # threads (PYBUDA_FORCE_THREADS) never restore each other's 1 and leave the process on one thread.
    if not active or threads == 1 or threading.current_thread() is not threading.main_thread():
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)



def run_stages(graph: Graph, ctx: CompileContext, results: "CompileResults", verify_cfg: Any = None,
               inputs: Optional[Sequence[torch.Tensor]] = None) -> _State:
    """Run :data:`STAGES` on a copy of ``graph`` up to ``ctx.config.compile_depth``, filling ``results``.

    ``inputs`` (tensors in ``graph.inputs`` order) are only used for verification: the model's outputs
    on them are compared with the compiled graph's when ``verify_cfg`` asks for it. Returns the final
    state (for the summary). Raises CompileError naming the stage (and op) on failure.

    What the process held before is frozen out of Python's cyclic garbage collector meanwhile
    (``gc.freeze``): a compile allocates hundreds of thousands of small objects, and every full
    collection they trigger would also walk everything already there (the model, torch), about a sixth
    of BERT-Large's compile time. The compile's own objects are still collected; afterwards everything
    is collectable again. When something is frozen already (a compile inside a compile, or the user's own
    ``gc.freeze``) the freeze is left as it is, so this never thaws what it did not freeze.

    Stages that do not run the model use torch on one intra-op thread (:func:`_one_torch_thread`). The
    passes re-add the same ops many times (every rewrite, every repeated layer): shape inference answers
    repeats from a memo that lasts for this compile (:func:`pybuda.ops.registry.memoized_inference`).
    """
    owner = gc.get_freeze_count() == 0
    if owner:
        gc.freeze()
    try:
        with memoized_inference():
            return _run_stages(graph, ctx, results, verify_cfg, inputs)
    finally:
        if owner:
            gc.unfreeze()


def _run_stages(graph: Graph, ctx: CompileContext, results: "CompileResults", verify_cfg: Any = None,
                inputs: Optional[Sequence[torch.Tensor]] = None) -> _State:
    """:func:`run_stages` with the collector already paused."""
    cfg = ctx.config
    state = _State(graph=graph.copy(), ctx=ctx, verify_cfg=verify_cfg,
                   inputs=list(inputs) if inputs is not None else None, results=results)
    state.graph.microbatch = ctx.microbatch
    for depth, fn in STAGES:
        if depth > cfg.compile_depth:
            break
        ctx.stage = depth.name
        t0 = time.perf_counter()
        try:
            with _one_torch_thread(depth not in _RUNS_THE_MODEL):
                fn(state)
        except ConfigError:
            raise  # a wrong override or option: the user's to fix, named as such
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
    return state


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
