"""Capture a JAX function or Flax linen module into a pybuda ``ir.Graph`` from its jaxpr.

``jax.make_jaxpr`` traces the model with the sample inputs (no TensorFlow involved); every equation of
the jaxpr is then mapped onto registry ops by the converters in :mod:`pybuda.frontend.jax.primitives`.
Call-like primitives (``jit``/``pjit``, ``closed_call``, ``custom_jvp_call``, ``custom_vjp_call``,
``remat``) are inlined. The arrays of ``params`` become graph parameters named by their pytree path
(``Dense_0.kernel``; a Flax ``params`` collection is dropped from the name, other collections such as
``batch_stats`` are kept as a prefix); arrays the function closes over become constants. For the device
(``for_device``) with CPU fallback enabled, equations the chip cannot run execute in JAX on the host
(:mod:`pybuda.frontend.jax.fallback`: CPU pre/post stages and a fallback report); with fallback off they
are an UnsupportedOpError listing every one.

Usage::

    result = capture(fn, (x,), params=params)             # fn(params, x)
    result = capture(flax_module, (x,), params=variables) # flax_module.apply(variables, x)
    result.graph                 # the ir.Graph
    outputs = result.run(x)      # the graph on the CPU reference, as torch tensors
"""

from __future__ import annotations

import inspect
import logging
import math
import re
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch

from pybuda.errors import CompileError, InputError, UnsupportedOp, UnsupportedOpError
from pybuda.frontend.aten_builder import Builder, Complex, Const, Missing, Unsupported
from pybuda.ir.graph import OP, Graph

log = logging.getLogger(__name__)

STAGE = "GENERATE_INITIAL_GRAPH"

#: Primitives whose sub-jaxpr is inlined (the param holding it is looked up in :data:`_SUBJAXPR_KEYS`).
INLINED = ("pjit", "jit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call",
           "custom_vjp_call_jaxpr", "remat", "checkpoint", "remat2", "custom_lin")
_SUBJAXPR_KEYS = ("jaxpr", "call_jaxpr", "fun_jaxpr")
#: Primitives with a sub-jaxpr that are loops, not calls: never inlined (their body runs many times). A short
#: ``scan`` is unrolled instead (:func:`pybuda.frontend.jax.scan.unroll_scan`).
_LOOPS = ("scan", "for", "while", "cond")
#: Primitives whose converters read complex pairs themselves (the others go through ``complex_values.complex_eqn``).
COMPLEX_AWARE = ("fft", "real", "imag", "convert_element_type")


def _jax():
    try:
        import jax
    except ImportError:  # pragma: no cover - depends on the environment
        raise CompileError("the JAX frontend needs jax (and flax for Flax modules): pip install 'pybuda[jax]'",
                           stage=STAGE) from None
    return jax


# --- dtypes and values -------------------------------------------------------------------------------
def is_key_dtype(dtype: Any) -> bool:
    """Whether ``dtype`` is a typed PRNG key dtype (``key<fry>``: ``jax.random.key``, Flax RNN carries).

    Such values have no tensor form: the capture folds them at capture time when they are constant, else
    the equations reading or producing them run in JAX on the host (CPU fallback)."""
    if dtype is None or isinstance(dtype, (np.dtype, torch.dtype)):
        return False
    try:
        jax = _jax()
        return bool(jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key))
    except Exception:  # not a dtype JAX knows
        return False


def is_key_value(value: Any) -> bool:
    """Whether ``value`` is a JAX array of typed PRNG keys."""
    return is_key_dtype(getattr(value, "dtype", None))


def _key_note(dtype: Any) -> str:
    return (f"PRNG key values ({dtype}) have no pybuda tensor type (use jax.random.key_data(key) to pass "
            f"the raw key bits as a uint32 array)")


def torch_dtype(dtype: Any) -> torch.dtype:
    """The torch dtype of a JAX/numpy dtype (bfloat16 included)."""
    if is_key_dtype(dtype):
        raise CompileError(_key_note(dtype), stage=STAGE)
    dt = np.dtype(dtype)
    if dt.name == "bfloat16":
        return torch.bfloat16
    if dt == np.bool_:
        return torch.bool
    return torch.from_numpy(np.zeros(0, dtype=dt)).dtype


def to_torch(value: Any) -> torch.Tensor:
    """A JAX/numpy array (or torch tensor, or pybuda Tensor) as a torch tensor (copied, CPU)."""
    if isinstance(value, torch.Tensor):
        return value.detach()
    if hasattr(value, "value") and callable(value.value) and not isinstance(value, np.ndarray):
        return value.value().detach()  # a pybuda Tensor
    if is_key_value(value):
        raise InputError(f"a {value.dtype}{list(value.shape)} array cannot become a pybuda tensor: "
                         f"{_key_note(value.dtype)}")
    arr = np.asarray(value)
    if arr.dtype.name == "bfloat16":
        return torch.from_numpy(arr.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(np.array(arr, copy=True))


def to_jax_array(value: Any) -> Any:
    """A torch tensor, pybuda Tensor, numpy array or scalar as a JAX array (torch int64 stays int64 only
    when JAX's x64 mode is on; otherwise JAX narrows it, as it does for numpy)."""
    jnp = _jax().numpy
    if is_key_value(value):
        return value  # typed PRNG keys stay as they are
    if hasattr(value, "value") and callable(value.value) and not isinstance(value, (np.ndarray, torch.Tensor)):
        value = value.value()
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu()
        if t.dtype == torch.bfloat16:
            return jnp.asarray(t.float().numpy(), dtype=jnp.bfloat16)
        return jnp.asarray(t.numpy())
    return jnp.asarray(value)


# --- naming ------------------------------------------------------------------------------------------
def _key_str(k: Any) -> str:
    for attr_name in ("key", "name", "idx"):
        if hasattr(k, attr_name):
            return str(getattr(k, attr_name))
    return str(k)


def parameter_names(params: Any) -> List[Tuple[str, Any]]:
    """``(name, leaf)`` for every array of a params pytree, in ``jax.tree_util`` flatten order.

    Names join the path with dots; a leading Flax ``params`` collection is dropped
    (``{'params': {'Dense_0': {'kernel': ..}}}`` -> ``Dense_0.kernel``). Typed PRNG key leaves are not
    parameters (they have no tensor form; the capture keeps them on the JAX side) and are left out."""
    return [(n, leaf) for n, leaf in _all_parameter_names(params) if not is_key_value(leaf)]


def _all_parameter_names(params: Any) -> List[Tuple[str, Any]]:
    """:func:`parameter_names` with the PRNG key leaves too (one per jaxpr parameter invar)."""
    jax = _jax()
    leaves = jax.tree_util.tree_flatten_with_path(params)[0]
    out: List[Tuple[str, Any]] = []
    seen: Dict[str, int] = {}
    for path, leaf in leaves:
        parts = [_key_str(k) for k in path]
        if len(parts) > 1 and parts[0] == "params":
            parts = parts[1:]
        name = ".".join(parts) or "param"
        if name in seen:
            seen[name] += 1
            name = f"{name}_{seen[name]}"
        else:
            seen[name] = 0
        out.append((name, leaf))
    return out


def _trainable(params: Any, with_keys: bool = False) -> List[bool]:
    """Which params leaves (those of :func:`parameter_names`; all of them ``with_keys``) are trainable: all
    but Flax collections other than ``params``."""
    jax = _jax()
    leaves = jax.tree_util.tree_flatten_with_path(params)[0]
    out = []
    for path, leaf in leaves:
        if is_key_value(leaf) and not with_keys:
            continue
        first = _key_str(path[0]) if path else ""
        is_flax_vars = isinstance(params, Mapping) and "params" in params
        out.append(not is_flax_vars or first == "params")
    return out


def _clean(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.]+", "_", name).strip("._") or "op"


def source_location(eqn: Any) -> str:
    """``file:line (function)`` of the user code that emitted ``eqn`` ('<unknown>' if JAX has none)."""
    try:
        from jax._src import source_info_util

        return source_info_util.summarize(eqn.source_info)
    except Exception:  # source info is best effort: private API
        return "<unknown>"


def name_stack(eqn: Any) -> str:
    """The eqn's name stack (Flax module path such as ``MLP/Dense_0``), or ''."""
    try:
        return str(eqn.source_info.name_stack)
    except Exception:
        return ""


def _is_flax_module(obj: Any) -> bool:
    try:
        import flax.linen as nn
    except ImportError:
        return False
    return isinstance(obj, nn.Module)


def as_apply_fn(fn_or_module: Any) -> Callable[..., Any]:
    """``fn(params, *inputs)`` for a plain function (itself) or a Flax module (``module.apply``)."""
    if _is_flax_module(fn_or_module):
        module = fn_or_module
        return lambda variables, *xs: module.apply(variables, *xs)
    if not callable(fn_or_module):
        raise CompileError(f"JAX capture expects a function fn(params, *inputs) or a Flax module, got "
                           f"{type(fn_or_module).__name__}", stage=STAGE)
    return fn_or_module


def input_names(fn_or_module: Any, count: int, with_params: bool = True) -> List[str]:
    """Graph input names from the function's signature (after ``params``), else ``input_<i>``."""
    target = fn_or_module.__call__ if _is_flax_module(fn_or_module) else fn_or_module
    names: List[str] = []
    try:
        sig = inspect.signature(target)
        names = [p.name for p in sig.parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if with_params and not _is_flax_module(fn_or_module):
            names = names[1:]
    except (TypeError, ValueError):
        names = []
    names = names[:count]
    names += [f"input_{i}" for i in range(len(names), count)]
    return names


# --- the builder --------------------------------------------------------------------------------------
@dataclass(eq=False)
class HostValue:
    """A value known at capture time that only JAX can hold (typed PRNG keys): the input of equations folded
    at capture time (:meth:`_Mapper.run_eqn`), never a graph tensor."""

    value: Any


class JaxBuilder(Builder):
    """The ATen mapper's :class:`~pybuda.frontend.aten_builder.Builder`, driven by jaxpr equations.

    Ops are named ``<name stack>.<primitive>`` (``MLP.Dense_0.dot_general``) and tagged with the source
    line (``source``), the Flax module path (``layer``) and the primitive (``jax``)."""

    def begin_eqn(self, eqn: Any) -> None:
        """Start emitting ops for jaxpr equation ``eqn``."""
        stack = name_stack(eqn)
        prim = eqn.primitive.name
        base = _clean(f"{stack.replace('/', '.')}.{prim}" if stack else prim)
        self.node = SimpleNamespace(name=base)
        self.op_types = []
        self._tags = {"source": source_location(eqn), "jax": prim}
        if stack:
            self._tags["layer"] = stack


# --- results -------------------------------------------------------------------------------------------
@dataclass
class JaxCaptureResult:
    """A captured JAX model: the device graph and the names of its inputs and outputs.

    Mirrors the torch frontend's ``CaptureResult``: :meth:`split_for_devices` (with CPU stages when some
    primitives run on the host, :mod:`pybuda.frontend.jax.fallback`), :meth:`flatten_inputs`, :meth:`run`,
    and ``report`` (the fallback report; None when nothing fell back)."""

    graph: Graph
    input_names: List[str]
    output_names: List[str]
    parameter_names: List[str]
    out_tree: Any = field(default=None, repr=False)
    jaxpr: Any = field(default=None, repr=False)
    primitive_counts: Dict[str, int] = field(default_factory=dict)
    pre: Optional[Callable[..., Any]] = None
    post: Optional[Callable[..., Any]] = None
    report: Any = None
    #: dtypes of the model's inputs (the graph's inputs differ when a CPU pre stage reads them); None for
    #: a typed PRNG key input, which only the CPU pre stage reads.
    input_dtypes: List[Optional[torch.dtype]] = field(default_factory=list)

    def split_for_devices(self):
        """``(pre, graph, post)``; the stages are None when the whole model is in the graph."""
        return self.pre, self.graph, self.post

    def flatten_inputs(self, *args: Any, **kwargs: Any) -> List[torch.Tensor]:
        """The inputs as the flat list of torch tensors the first stage takes."""
        dtypes = self.input_dtypes or [node.dtype for node in self.graph.inputs]
        values = list(args) + [kwargs[k] for k in kwargs]
        if len(values) != len(dtypes):
            raise InputError(f"graph '{self.graph.name}' takes {len(dtypes)} input(s) "
                             f"{self.input_names}, got {len(values)}")
        flat = []
        for i, (v, dt) in enumerate(zip(values, dtypes)):
            if dt is None:  # a typed PRNG key input: read by the CPU pre stage, in JAX
                if not is_key_value(v):
                    raise InputError(f"input {i} of '{self.graph.name}' must be a typed PRNG key "
                                     f"(jax.random.key), got {type(v).__name__}")
                flat.append(v)
                continue
            t = to_torch(v)
            flat.append(t.to(dt) if t.dtype != dt else t)
        return flat

    def run(self, *args: Any, parameters: Optional[Mapping[str, torch.Tensor]] = None) -> List[torch.Tensor]:
        """Run CPU pre -> the graph on the CPU reference -> CPU post; returns the flat outputs as torch tensors."""
        from pybuda.verify import run_graph_on_cpu

        with torch.no_grad():
            values = self.flatten_inputs(*args)
            if self.pre is not None:
                values = list(self.pre(*values))
            values = list(run_graph_on_cpu(self.graph, values, parameters=parameters))
            if self.post is not None:
                values = list(self.post(*values))
            return values

    def unflatten_outputs(self, flat: Sequence[Any]) -> Any:
        """The model's output structure (tuple, dict ...) rebuilt from flat outputs."""
        if self.out_tree is None:
            return tuple(flat)
        return _jax().tree_util.tree_unflatten(self.out_tree, list(flat))


# --- capture -------------------------------------------------------------------------------------------
def make_jaxpr(fn_or_module: Any, sample_inputs: Sequence[Any], params: Any = None):
    """``(closed_jaxpr, out_tree)`` of the model on the sample inputs (params first when given)."""
    jax = _jax()
    fn = as_apply_fn(fn_or_module)
    xs = [to_jax_array(x) for x in sample_inputs]
    if params is None and _is_flax_module(fn_or_module):
        raise CompileError("a Flax module needs its variables ({'params': ...}) to be captured", stage=STAGE)
    try:
        if params is None:
            closed, shape = jax.make_jaxpr(fn, return_shape=True)(*xs)
        else:
            closed, shape = jax.make_jaxpr(fn, return_shape=True)(params, *xs)
    except Exception as e:  # tracing failures are user errors (shapes, concrete values)
        raise CompileError(f"tracing the JAX model failed: {type(e).__name__}: {e}", stage=STAGE) from e
    out_tree = jax.tree_util.tree_structure(shape)
    return closed, out_tree


def _unwrap(closed: Any) -> Tuple[Any, List[Tuple[Any, Any]]]:
    """``(jaxpr, [(constvar, value)])``: a model whose whole body is one call (``jit`` of the function,
    ``closed_call`` ...) is unwrapped to that call's jaxpr, so CPU fallback can split its equations."""
    jaxpr, consts = closed.jaxpr, list(zip(closed.jaxpr.constvars, closed.consts))
    while len(jaxpr.eqns) == 1:
        eqn = jaxpr.eqns[0]
        if eqn.primitive.name in _LOOPS:
            break
        sub = next((eqn.params[k] for k in _SUBJAXPR_KEYS if k in eqn.params), None)
        if sub is None or not (hasattr(sub, "eqns") or hasattr(sub, "jaxpr")):
            break
        inner = sub if hasattr(sub, "eqns") else sub.jaxpr
        if (list(eqn.invars) != list(jaxpr.invars) or list(eqn.outvars) != list(jaxpr.outvars)
                or len(inner.invars) != len(jaxpr.invars)):
            break
        jaxpr, consts = inner, list(zip(inner.constvars, list(getattr(sub, "consts", []) or [])))
    return jaxpr, consts


def _fallback_enabled(config: Any) -> bool:
    from pybuda.config import _get_global_compiler_config

    cfg = config if config is not None else _get_global_compiler_config()
    return bool(getattr(cfg, "enable_tvm_cpu_fallback", False))


def capture(fn_or_module: Any, sample_inputs: Sequence[Any], params: Any = None, graph_name: Optional[str] = None,
            *, names: Optional[Sequence[str]] = None, for_device: bool = False, config: Any = None,
            fallback: Optional[bool] = None) -> JaxCaptureResult:
    """Capture a JAX function ``fn(params, *inputs)`` (or ``fn(*inputs)`` without params) or a Flax
    linen module (with its variables as ``params``) into an ``ir.Graph``.

    Args:
        fn_or_module: the function or ``flax.linen.Module``.
        sample_inputs: arrays (torch, numpy or JAX) fixing the input shapes and dtypes.
        params: the pytree of arrays passed as the first argument; they become graph parameters.
        graph_name: the graph's name (default: the function's or module class's name).
        names: graph input names (default: from the signature).
        for_device: also reject ops the chip cannot run (:mod:`pybuda.passes.lower.capabilities`).
        config: the compiler config whose ``enable_tvm_cpu_fallback`` decides CPU fallback (default: the
            global one).
        fallback: run unsupported primitives in JAX on the host (:mod:`pybuda.frontend.jax.fallback`)
            instead of raising. Default: when ``for_device`` and the config enables CPU fallback.

    Raises:
        UnsupportedOpError: some primitives have no mapping (or, for the device, no device form) and
            fallback is off; lists every one with its count and the source lines that emitted it.
        CompileError: tracing failed.
    """
    if not isinstance(sample_inputs, (list, tuple)):
        sample_inputs = (sample_inputs,)
    closed, out_tree = make_jaxpr(fn_or_module, sample_inputs, params)
    for i, var in enumerate(closed.jaxpr.outvars):
        if is_key_dtype(var.aval.dtype):
            raise CompileError(f"output {i} of the model is a PRNG key array ({var.aval.dtype}"
                               f"{list(var.aval.shape)}): {_key_note(var.aval.dtype)}", stage=STAGE)
    name = graph_name or getattr(fn_or_module, "__name__", None) or type(fn_or_module).__name__
    if fallback is None:
        fallback = for_device and _fallback_enabled(config)
    graph = Graph(_clean(name))
    b = JaxBuilder(graph)
    jaxpr, const_pairs = _unwrap(closed)
    env: Dict[Any, Any] = {}

    param_entries = _all_parameter_names(params) if params is not None else []
    trainable = _trainable(params, with_keys=True) if params is not None else []
    n_params = len(param_entries)
    if len(jaxpr.invars) != n_params + len(sample_inputs):
        raise CompileError(f"the jaxpr takes {len(jaxpr.invars)} arrays, expected {n_params} params and "
                           f"{len(sample_inputs)} inputs (inputs must be arrays, not pytrees)", stage=STAGE)
    _bind_parameters(graph, env, jaxpr.invars[:n_params], param_entries, trainable)
    in_names = list(names) if names else input_names(fn_or_module, len(sample_inputs), params is not None)
    for var, iname in zip(jaxpr.invars[n_params:], in_names):
        aval = var.aval
        if is_key_dtype(aval.dtype):  # only JAX on the host can read it: the equations using it fall back
            env[var] = Missing(f"input '{iname}' is a PRNG key ({aval.dtype}), read in JAX on the host")
            continue
        env[var] = graph.add_input(graph.unique_name(_clean(iname)), tuple(aval.shape), torch_dtype(aval.dtype)).name
    for i, (var, value) in enumerate(const_pairs):
        env[var] = HostValue(value) if is_key_value(value) else Const(to_torch(value), f"const_{i}")
    user_vars = list(jaxpr.invars[n_params:])
    input_dtypes = [None if isinstance(env[v], Missing) else graph[env[v]].dtype for v in user_vars]
    key_inputs = any(isinstance(env[v], Missing) for v in user_vars)

    mapper = _Mapper(b, for_device)
    host: Dict[int, str] = {}
    for i, eqn in enumerate(jaxpr.eqns):
        before = len(mapper.unsupported)
        mapper.run_eqn(eqn, env)
        if len(mapper.unsupported) > before:
            prim, _, reason = mapper.unsupported[before]
            host[i] = reason if prim == eqn.primitive.name else f"jax.lax.{prim} inside it: {reason}"
    if mapper.unsupported and not fallback:
        raise UnsupportedOpError(mapper.report())
    if host or key_inputs:
        bound = {v: to_jax_array(leaf) for v, (_, leaf) in zip(jaxpr.invars[:n_params], param_entries)}
        bound.update({v: value for v, value in const_pairs})
        # PRNG keys folded at capture time: the stages and the device graph read them from here.
        top_outs = {v for e in jaxpr.eqns for v in e.outvars}
        bound.update({v: env[v].value for v in top_outs if isinstance(env.get(v), HostValue)})
        return _split(fn_or_module, name, jaxpr, host, bound, param_entries, trainable, user_vars,
                      in_names, input_dtypes, for_device, out_tree, closed, dict(mapper.counts))
    return _finish(graph, b, mapper, env, jaxpr.outvars, param_entries, out_tree, closed, input_dtypes)


def _bind_parameters(graph: Graph, env: Dict[Any, Any], invars: Sequence[Any],
                     param_entries: Sequence[Tuple[str, Any]], trainable: Sequence[bool]) -> None:
    """Graph parameters for the params leaves; a typed PRNG key leaf stays a JAX value (:class:`HostValue`)."""
    for var, (pname, leaf), req in zip(invars, param_entries, trainable):
        if is_key_value(leaf):
            env[var] = HostValue(leaf)
            continue
        value = to_torch(leaf)
        env[var] = graph.add_parameter(graph.unique_name(pname), value, requires_grad=bool(req and
                                       value.dtype.is_floating_point)).name


def _finish(graph: Graph, b: "JaxBuilder", mapper: "_Mapper", env: Dict[Any, Any], outvars: Sequence[Any],
            param_entries: Sequence[Tuple[str, Any]], out_tree: Any, closed: Any, input_dtypes: List[torch.dtype],
            pre: Any = None, post: Any = None, report: Any = None) -> JaxCaptureResult:
    """Add the graph outputs for ``outvars`` and wrap up the capture result."""
    out_names = []
    b.node = None
    for i, var in enumerate(outvars):
        value = mapper.read(env, var)
        if isinstance(value, Missing):
            raise CompileError(f"output {i} is a value pybuda does not compute ({value.reason})", stage=STAGE)
        src = b.tensor(value) if not isinstance(value, (bool, int, float)) else \
            b.const(torch.full(tuple(var.aval.shape), value, dtype=torch_dtype(var.aval.dtype)), f"output_{i}")
        src = _fix_shape(b, src, var.aval)
        if graph[src].kind != OP or graph[src].op_type in ("nop",) or any(
                graph[o].operands[0] == src for o in out_names):
            src = graph.add_op(graph.unique_name(f"output_{i}.passthrough"), "nop", [src]).name
        out_names.append(graph.add_output(graph.unique_name(f"{graph.name}.output_{i}"), src).name)
    graph.eliminate_dead_code()
    return JaxCaptureResult(graph, [n.name for n in graph.inputs], out_names,
                            [n for n, leaf in param_entries if not is_key_value(leaf)],
                            out_tree, closed, dict(mapper.counts), pre, post, report, input_dtypes)


def _split(fn_or_module: Any, name: str, jaxpr: Any, host: Mapping[int, str], bound: Mapping[Any, Any],
           param_entries: Sequence[Tuple[str, Any]], trainable: Sequence[bool], user_vars: Sequence[Any],
           in_names: Sequence[str], input_dtypes: List[torch.dtype], for_device: bool, out_tree: Any, closed: Any,
           counts: Dict[str, int]) -> JaxCaptureResult:
    """The capture with CPU stages: partition the top-level equations, then map the device ones."""
    from pybuda.frontend import fallback as shared
    from pybuda.frontend.jax import fallback as jf

    eqns = list(jaxpr.eqns)
    # Equations reading PRNG keys go before the device, so that no key crosses the device graph.
    key_readers = {i for i in host if any(not _is_literal(v) and is_key_dtype(v.aval.dtype)
                                          for v in eqns[i].invars)}
    stage, side, moved = jf.partition(eqns, host, force_pre=key_readers)
    key_inputs = [v for v in user_vars if is_key_dtype(v.aval.dtype)]
    copies = jf.post_copies(eqns, stage, bound)
    dev_inputs, dev_outputs = jf.plan(eqns, stage, user_vars, jaxpr.outvars, bound, need_pre=bool(key_inputs),
                                      copied_to_post=copies)
    for v in list(dev_inputs) + list(dev_outputs):  # pragma: no cover - the partition rules this out
        if not _is_literal(v) and is_key_dtype(v.aval.dtype):
            raise CompileError(f"CPU fallback: a PRNG key value ({v.aval.dtype}) would cross the device graph: "
                               f"{_key_note(v.aval.dtype)}", stage=STAGE)
    pre_idx = [i for i in range(len(eqns)) if stage[i] == shared.PRE]
    dev_idx = [i for i in range(len(eqns)) if stage[i] == shared.DEVICE]
    post_idx = [i for i in range(len(eqns)) if stage[i] == shared.POST or i in copies]
    label = _clean(name)
    # Values the CPU stage hands the device whose dim 0 is not the samples' (a time-major scan's result): the
    # runtime cuts and joins pushes along dim 0, so they cross with a leading sample dim of their own.
    lead = shared.off_batch({v: tuple(v.aval.shape) for v in user_vars if not is_key_dtype(v.aval.dtype)},
                            {v: tuple(v.aval.shape) for v in dev_inputs}) if pre_idx else set()
    pre = jf.JaxStage(f"{label}_cpu_pre", [eqns[i] for i in pre_idx], user_vars, dev_inputs, bound, lead) \
        if pre_idx or key_inputs else None
    post = jf.JaxStage(f"{label}_cpu_post", [eqns[i] for i in post_idx], dev_outputs, jaxpr.outvars, bound) \
        if post_idx else None

    graph = Graph(label)
    b = JaxBuilder(graph)
    env: Dict[Any, Any] = {}
    n_params = len(param_entries)
    _bind_parameters(graph, env, jaxpr.invars[:n_params], param_entries, trainable)
    for i, var in enumerate(jaxpr.constvars):
        if var in bound:
            env[var] = HostValue(bound[var]) if is_key_value(bound[var]) else Const(to_torch(bound[var]),
                                                                                   f"const_{i}")
    top_outs = {v for e in eqns for v in e.outvars}
    for var, value in bound.items():  # PRNG keys folded at capture time
        if var in top_outs:
            env[var] = HostValue(value)
    user_names = dict(zip(user_vars, in_names))
    for k, var in enumerate(dev_inputs):
        iname = user_names.get(var, f"host_{k}")
        shape = tuple(int(d) for d in var.aval.shape)
        if var in lead:  # arrives with a leading sample dim (see above)
            env[var] = shared.add_sample_input(graph, _clean(iname), shape, torch_dtype(var.aval.dtype))
            continue
        env[var] = graph.add_input(graph.unique_name(_clean(iname)), shape, torch_dtype(var.aval.dtype)).name
    mapper = _Mapper(b, for_device)
    for i in dev_idx:
        mapper.run_eqn(eqns[i], env)
    if mapper.unsupported:  # pragma: no cover - the same equations mapped in the first pass
        raise UnsupportedOpError(mapper.report())
    decisions = [shared.FallbackOp(f"eqn_{u}", f"jax.lax.{eqns[u].primitive.name}", source_location(eqns[u]),
                                   host[u], side[u], moved[u]) for u in sorted(host)]
    describe = [f"eqn_{i} ({eqns[i].primitive.name})" for i in range(len(eqns))]
    report = None
    if host:  # (a CPU pre stage that only takes a PRNG key input off the device is no fallback)
        report = shared.FallbackReport(label, True, decisions, [describe[i] for i in pre_idx],
                                       [describe[i] for i in post_idx], len(dev_idx))
        if not shared.warn_if_large(report):
            log.info("%s", report)
    result = _finish(graph, b, mapper, env, dev_outputs, param_entries, out_tree, closed, input_dtypes, pre, post,
                     report)
    result.primitive_counts = counts
    if pre is not None:
        result.input_names = [user_names[v] for v in user_vars]
    return result


def _fix_shape(b: Builder, name: str, aval: Any) -> str:
    """``name`` with the aval's shape and dtype (scalars live as shape (1,) in the graph)."""
    shape = tuple(int(d) for d in aval.shape)
    dtype = torch_dtype(aval.dtype)
    node = b.graph[name]
    if node.shape != shape and math.prod(node.shape) == math.prod(shape):
        name = b.op("reshape", [name], shape=shape)
    if b.graph[name].dtype != dtype:
        name = b.cast(name, dtype)
    return name


class _Mapper:
    """Walks a jaxpr (inlining calls), converting each equation and collecting unsupported ones."""

    def __init__(self, b: JaxBuilder, for_device: bool):
        from pybuda.frontend.jax import primitives

        self.b = b
        self.for_device = for_device
        self.converters = primitives.CONVERTERS
        self.unsupported: List[Tuple[str, str, str]] = []  # (primitive, location, reason)
        self.counts: Dict[str, int] = {}

    def read(self, env: Mapping[Any, Any], var: Any) -> Any:
        if _is_literal(var):
            return _literal_value(var)
        return env[var]

    def run_jaxpr(self, jaxpr: Any, env: Dict[Any, Any]) -> None:
        for eqn in jaxpr.eqns:
            self.run_eqn(eqn, env)

    def _inline(self, eqn: Any, env: Dict[Any, Any]) -> bool:
        # Any primitive carrying a sub-jaxpr (the INLINED ones, and newer call-like primitives) is inlined;
        # loops (scan: flax nn.RNN, nn.scan, lax.fori_loop) are not calls and stay unmapped.
        if eqn.primitive.name in _LOOPS:
            return False
        sub = next((eqn.params[k] for k in _SUBJAXPR_KEYS if k in eqn.params), None)
        if sub is None or not (hasattr(sub, "eqns") or hasattr(sub, "jaxpr")):
            return False
        inner = sub if hasattr(sub, "eqns") else sub.jaxpr
        consts = list(getattr(sub, "consts", []) or [])
        sub_env: Dict[Any, Any] = {}
        for i, (var, value) in enumerate(zip(inner.constvars, consts)):
            sub_env[var] = Const(to_torch(value), f"{eqn.primitive.name}_const_{i}")
        args = [self.read(env, v) for v in eqn.invars]
        # custom_vjp_call may pass extra leading consts; align from the end.
        for var, value in zip(inner.invars, args[len(args) - len(inner.invars):]):
            sub_env[var] = value
        self.run_jaxpr(inner, sub_env)
        for out, var in zip(eqn.outvars, inner.outvars):
            env[out] = self.read(sub_env, var)
        return True

    def _call(self, eqn: Any, env: Dict[Any, Any]) -> bool:
        """Convert a named call as a whole (``primitives.CALLS``); False to inline it instead."""
        from pybuda.frontend.jax import primitives

        conv = primitives.CALLS.get(str(eqn.params.get("name", "")))
        if conv is None:
            return False
        args = [self.read(env, v) for v in eqn.invars]
        if any(isinstance(a, Missing) for a in args):
            return False
        self.b.begin_eqn(eqn)
        mark = len(self.b.graph.nodes)
        try:
            value = _fix_shape(self.b, conv(self.b, eqn, args), eqn.outvars[0].aval)
        except Unsupported:
            self.drop_nodes_since(mark)
            return False
        self.counts[eqn.params["name"]] = self.counts.get(eqn.params["name"], 0) + 1
        env[eqn.outvars[0]] = value
        return True

    def drop_nodes_since(self, mark: int) -> None:
        """Remove the graph nodes emitted after the first ``mark`` (an attempt that turned out unsupported)."""
        for name in list(self.b.graph.nodes)[mark:]:
            self.b.graph.nodes.pop(name)
            self.b.graph.tensors.pop(name, None)

    def run_eqn(self, eqn: Any, env: Dict[Any, Any]) -> None:
        prim = eqn.primitive.name
        b = self.b
        if _touches_key(eqn):
            self._key_eqn(eqn, env)
            return
        conv = self.converters.get(prim)
        if conv is None and prim in ("jit", "pjit") and self._call(eqn, env):
            return
        if prim == "scan":
            from pybuda.frontend.jax.scan import unroll_scan

            if unroll_scan(self, eqn, env):
                return
        if conv is None and self._inline(eqn, env):
            return
        self.counts[prim] = self.counts.get(prim, 0) + 1
        args = [self.read(env, v) for v in eqn.invars]
        if conv is None:
            self._fail(eqn, "no mapping to a pybuda op")
            self._standins(eqn, env)
            return
        if any(isinstance(a, Missing) for a in args):
            self._standins(eqn, env)
            return
        b.begin_eqn(eqn)
        before = len(b.graph.nodes)
        try:
            if any(isinstance(a, (Complex, complex)) for a in args) and prim not in COMPLEX_AWARE:
                from pybuda.frontend.jax.complex_values import complex_eqn

                result = complex_eqn(b, eqn, args, conv)
            else:
                result = conv(b, eqn, args)
            outs = list(result) if isinstance(result, (list, tuple)) else [result]
            if len(outs) != len(eqn.outvars):
                raise Unsupported(f"converter produced {len(outs)} results, the primitive has {len(eqn.outvars)}")
            fixed = []
            for value, var in zip(outs, eqn.outvars):
                if isinstance(value, str):
                    value = _fix_shape(b, value, var.aval)
                fixed.append(value)
            if len(fixed) == 1:
                fixed = [b.finish(fixed[0])]
        except Unsupported as e:
            self._fail(eqn, str(e))
            self._standins(eqn, env)
            return
        if self.for_device:
            reason = _device_unsupported(b.graph, list(b.graph.nodes)[before:])
            if reason is not None:
                self._fail(eqn, reason)
        for var, value in zip(eqn.outvars, fixed):
            env[var] = value

    def _key_eqn(self, eqn: Any, env: Dict[Any, Any]) -> None:
        """An equation reading or producing typed PRNG keys. With every operand known at capture time
        (``jax.random.key(0)``, ``split``, ``normal(key, shape)`` of such a key) JAX evaluates it here: keys
        stay :class:`HostValue` s and arrays become constants. Otherwise it cannot be on the device: keys
        have no tensor form, so it runs in JAX on the host (CPU fallback) or is an UnsupportedOpError."""
        prim = eqn.primitive.name
        self.counts[prim] = self.counts.get(prim, 0) + 1
        values = []
        for var in eqn.invars:
            if _is_literal(var):
                values.append(var.val)
                continue
            value = env[var]
            if isinstance(value, HostValue):
                values.append(value.value)
            elif isinstance(value, Const):
                values.append(to_jax_array(value.value).astype(var.aval.dtype))
            elif isinstance(value, (bool, int, float)):
                values.append(_jax().numpy.asarray(value, dtype=var.aval.dtype))
            else:
                values = None
                break
        outs = None
        if values is not None:
            from pybuda.frontend.jax.fallback import eval_eqn

            try:
                outs = eval_eqn(eqn, values)
            except Exception as e:  # JAX refused: leave it to the host at run time
                log.debug("folding %s at capture time failed: %s", prim, e)
        if outs is None:
            dtypes = ", ".join(dict.fromkeys(str(v.aval.dtype) for v in list(eqn.invars) + list(eqn.outvars)
                                             if not _is_literal(v) and is_key_dtype(v.aval.dtype)))
            self._fail(eqn, f"reads or produces PRNG keys ({dtypes}) computed at run time; keys have no pybuda "
                            f"tensor type, so it can only run in JAX on the host (CPU fallback)")
            self._standins(eqn, env)
            return
        stack = _clean(name_stack(eqn).replace("/", ".")) if name_stack(eqn) else ""
        for i, (var, value) in enumerate(zip(eqn.outvars, outs)):
            if is_key_value(value):
                env[var] = HostValue(value)
            else:
                env[var] = Const(to_torch(value), f"{stack + '.' if stack else ''}{prim}_folded_{i}")

    def _fail(self, eqn: Any, reason: str) -> None:
        self.unsupported.append((eqn.primitive.name, source_location(eqn), reason))

    def _standins(self, eqn: Any, env: Dict[Any, Any]) -> None:
        # Placeholder inputs let the equations after an unmapped one be checked too.
        g = self.b.graph
        for i, var in enumerate(eqn.outvars):
            aval = var.aval
            if is_key_dtype(aval.dtype):
                env[var] = Missing(f"a PRNG key ({aval.dtype}) from jax.lax.{eqn.primitive.name}")
                continue
            env[var] = g.add_input(g.unique_name(f"unmapped.{eqn.primitive.name}.{i}"),
                                   tuple(int(d) for d in aval.shape), torch_dtype(aval.dtype)).name

    def report(self) -> List[UnsupportedOp]:
        """One entry per unsupported primitive: its count, source lines and reasons."""
        grouped: Dict[str, List[Tuple[str, str]]] = {}
        for prim, loc, reason in self.unsupported:
            grouped.setdefault(prim, []).append((loc, reason))
        out = []
        for prim, hits in grouped.items():
            locs = list(dict.fromkeys(loc for loc, _ in hits))
            reasons = list(dict.fromkeys(r for _, r in hits))
            where = "; ".join(locs[:5]) + (f"; and {len(locs) - 5} more" if len(locs) > 5 else "")
            out.append(UnsupportedOp(f"jax.lax.{prim} (x{len(hits)})", where, "; ".join(reasons[:3])))
        return out


def _device_unsupported(graph: Graph, created: Sequence[str]) -> Optional[str]:
    from pybuda.passes.lower.capabilities import unsupported_reason

    for name in created:
        node = graph.nodes.get(name)
        if node is not None and node.kind == OP:
            reason = unsupported_reason(graph, node)
            if reason is not None:
                return reason
    return None


def _is_literal(var: Any) -> bool:
    return type(var).__name__ == "Literal"


def _touches_key(eqn: Any) -> bool:
    """Whether the equation reads or produces a typed PRNG key."""
    return any(not _is_literal(v) and is_key_dtype(getattr(v.aval, "dtype", None))
               for v in list(eqn.invars) + list(eqn.outvars))


def _literal_value(var: Any) -> Any:
    """A rank-0 literal as a Python scalar; larger literals as a Const."""
    val = np.asarray(var.val)
    if val.ndim == 0:
        item = val.item()
        if val.dtype == np.bool_:
            return bool(item)
        return item
    return Const(to_torch(val), "literal")
