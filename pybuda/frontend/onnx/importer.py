"""The ONNX importer: an ``onnx.ModelProto`` onto pybuda registry ops, with CPU fallback per ONNX node.

Steps (:func:`import_model`):

1. load, check and (below opset 13) upgrade the model (:mod:`.model`); bind dynamic dims to the sample
   inputs' shapes; replace function ops without a converter (Attention, RMSNormalization, the losses …) by
   their ONNX function bodies (:mod:`.functions`); probe every intermediate value once in ONNX Runtime
   (static shapes and dtypes);
2. walk the nodes in order. A node whose inputs are all known at import time (constants, integer
   initializers, shapes of static tensors) is evaluated right away (``onnx.reference``; where that fails, the
   sample run's value, which is the same), so ``Shape -> Gather -> Concat -> Reshape`` chains fold into
   constants, and an If whose condition is known is the branch it takes. Every other node goes through its
   converter in :mod:`.ops` (one per ONNX op type) that emits registry ops through the torch frontend's
   :class:`~pybuda.frontend.aten_builder.Builder`;
3. nodes without a converter, whose converter cannot express the call, whose ops the chip cannot run
   (:mod:`pybuda.passes.lower.capabilities`, when compiling for the device) or whose op type is in
   ``cpu_fallback_ops`` run on the host: exactly the torch frontend's rule (:mod:`pybuda.frontend.fallback`)
   picks the smaller of their ancestors (CPU *pre*) or descendants (CPU *post*), and those stages are ONNX
   subgraphs run by ONNX Runtime (:class:`~pybuda.frontend.onnx.stages.OnnxStage`). With fallback disabled,
   :class:`~pybuda.errors.UnsupportedOpError` lists every such node with its name and op type.
   Values crossing between the stages and the device must be device data (a float, integer or boolean
   element type of static, non-empty shape; integers within Float32's exact range): when the rule's split
   would send another one (bfloat16 results, float8, int4, strings, empty tensors) across, every host node
   goes to the post side instead, then to the pre side; when neither works the whole model is one CPU
   stage (``OnnxCapture.host``). Exact-GELU chains of exporters without a Gelu op become one ``gelu``
   (:mod:`.fusion`).

Float initializers become parameters (``requires_grad=False``); integer ones stay constants (they are
shapes and indices). Infinite constants (``-inf`` mask fills) enter the device graph as
:data:`~pybuda.frontend.onnx.converter.INF_STANDIN`; what a converter is handed is :mod:`.converter`.
Which models must run wholly on the device is :func:`pybuda.frontend.onnx.coverage.device_mappable`. The result is an :class:`OnnxCapture`, which follows the stage contract of
:meth:`pybuda.frontend.torch.CaptureResult.split_for_devices`.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Dict, List, Mapping, Optional, Sequence, Set, Tuple

import numpy as np
import torch

from pybuda.errors import CompileError, InputError, UnsupportedOp, UnsupportedOpError
from pybuda.frontend.aten_builder import Const, Missing, Unsupported
from pybuda.frontend.fallback import FallbackOp, FallbackReport, add_sample_input, off_batch, warn_if_large
from pybuda.frontend.onnx import model as onnx_model
from pybuda.frontend.onnx.converter import CONVERTERS, STAGE, NodeCtx, OnnxAttributeError, OnnxBuilder, Param
from pybuda.frontend.onnx.model import onnx
from pybuda.frontend.onnx.split import DEVICE, POST, PRE, SplitPlanner
from pybuda.ir.graph import OP, Graph

log = logging.getLogger(__name__)

#: Ops never folded at import time: their result is not a function of their inputs.
NONDETERMINISTIC = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli",
                              "Multinomial"})


def _safe(name: str) -> str:
    cleaned = re.sub(r"[^0-9A-Za-z_.]", "_", name).strip("_.") or "v"
    return cleaned if not cleaned[0].isdigit() else "v" + cleaned


# --- the capture result -----------------------------------------------------------------------------
@dataclass
class OnnxCapture:
    """An imported ONNX model: device graph, fallback report and optional CPU stages (ONNX Runtime).

    Follows the torch frontend's stage contract (:mod:`pybuda.frontend.fallback`): ``pre(*flat_inputs)``
    returns the device graph's inputs, ``post(*device_outputs)`` the model's outputs; both are
    :class:`~pybuda.frontend.onnx.stages.OnnxStage` callables over torch tensors.
    """

    graph: Graph
    report: FallbackReport
    pre: Optional[Callable[..., Tuple[torch.Tensor, ...]]]
    post: Optional[Callable[..., Tuple[torch.Tensor, ...]]]
    input_names: List[str]
    output_names: List[str]  # the model's ONNX output names
    bound_inputs: Dict[str, np.ndarray] = field(default_factory=dict)  # inputs specialised as constants
    output_dtypes: List[Optional[np.dtype]] = field(default_factory=list)  # None: not a tensor output
    #: The whole model as one CPU stage, when no split into pre/device/post exists (``graph`` is then
    #: empty): e.g. a value of an element type the device cannot hold (bfloat16, float8, int4, strings)
    #: or an empty tensor would have to cross the device. ``host_reason`` says which.
    host: Optional[Callable[..., Tuple[Any, ...]]] = None
    host_reason: str = ""
    node_labels: List[str] = field(default_factory=list)  # per ONNX node (in model order): its ops' name prefix

    def node_of_op(self, op_name: str) -> Optional[str]:
        """The label of the ONNX node whose mapping made graph op ``op_name`` (None when none did)."""
        best = None
        for label in self.node_labels:
            if (op_name == label or op_name.startswith(label + ".")) and (best is None or len(label) > len(best)):
                best = label
        return best

    def split_for_devices(self):
        """``(pre, device_graph, post)``; missing stages are None. CompileError for a model that runs only
        on the host (:attr:`host`)."""
        if self.host is not None:
            raise CompileError(f"ONNX model '{self.graph.name}' has no part for the device ({self.host_reason}); "
                               f"run it with pybuda.frontend.onnx.backend or ONNX Runtime", stage=STAGE)
        return self.pre, self.graph, self.post

    def flatten_inputs(self, *args: Any, **kwargs: Any) -> List[torch.Tensor]:
        """The model inputs (positional, or keyword by ONNX input name) as the flat list the stages take;
        inputs bound as constants at import are dropped."""
        if kwargs:
            missing = [n for n in self.all_inputs if n not in kwargs]
            if args or missing:
                raise InputError(f"ONNX model '{self.graph.name}': pass inputs either all by position or all by "
                                 f"name {self.all_inputs}")
            args = tuple(kwargs[n] for n in self.all_inputs)
        if len(args) != len(self.all_inputs):
            raise InputError(f"ONNX model '{self.graph.name}' takes {len(self.all_inputs)} input(s) "
                             f"{self.all_inputs}, got {len(args)}")
        flat = []
        for name, a in zip(self.all_inputs, args):
            if name in self.bound_inputs:
                continue
            if not isinstance(a, torch.Tensor):
                try:
                    a = torch.as_tensor(np.asarray(a))
                except (TypeError, RuntimeError):  # element types torch lacks stay numpy (host stages read them)
                    a = np.asarray(a)
            flat.append(a)
        return flat

    all_inputs: List[str] = field(default_factory=list)

    def run(self, *args: Any, executor: Optional[Callable[..., Any]] = None) -> List[torch.Tensor]:
        """Run pre -> device graph -> post; the device graph on ``executor(graph, inputs)`` (default: the
        CPU reference)."""
        from pybuda.verify import run_graph_on_cpu

        flat = self.flatten_inputs(*args)
        if self.host is not None:
            return list(self.host(*flat))
        with torch.no_grad():
            values = list(self.pre(*flat)) if self.pre is not None else flat
            values = list(executor(self.graph, values) if executor is not None else run_graph_on_cpu(self.graph, values))
            if self.post is not None:
                values = list(self.post(*values))
        return values


# --- the importer -----------------------------------------------------------------------------------
def _as_numpy(x: Any) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    if hasattr(x, "value") and callable(x.value):  # pybuda Tensor
        return _as_numpy(x.value())
    return np.asarray(x)


def _to_torch(a: np.ndarray) -> torch.Tensor:
    a = np.asarray(a)
    if a.dtype == np.dtype("uint16") or a.dtype == np.dtype("uint32") or a.dtype == np.dtype("uint64"):
        return torch.from_numpy(a.astype(np.int64))
    return torch.from_numpy(np.array(a, copy=True))


def import_model(model_or_path: Any, *samples: Any, name: Optional[str] = None, config: Any = None,
                 for_device: bool = True, bind_inputs: Sequence[str] = (),
                 host_nodes: Optional[Mapping[str, str]] = None) -> OnnxCapture:
    """Import an ONNX model for the given sample inputs (numpy arrays or torch tensors, one per graph input).

    Args:
        model_or_path: an ``onnx.ModelProto``, a path to a ``.onnx`` file, or its bytes.
        samples: one value per model input; their shapes bind the model's dynamic dims.
        name: graph name (default: the ONNX graph's name).
        config: a :class:`pybuda.config.CompilerConfig` (default: the global one); reads
            ``enable_tvm_cpu_fallback`` and ``cpu_fallback_ops`` (ONNX op types or registry op names).
        for_device: ops the chip cannot run count as unsupported (CPU fallback or UnsupportedOpError).
        bind_inputs: names of inputs whose sample *values* become constants (e.g. integer shape inputs).
        host_nodes: ``{node name or label: reason}`` for nodes that must run on the host although they map
            (e.g. the compiler failed on them); with fallback disabled they are listed as unsupported.

    Raises:
        ModuleError: the model is malformed (bad proto, fails the checker, an input without a shape).
        InputError: the samples do not match the model's inputs.
        OnnxAttributeError: a node has an attribute value its op does not accept.
        UnsupportedOpError: fallback is disabled and some nodes cannot run on the device (lists them all).
    """
    from pybuda.config import _get_global_compiler_config
    from pybuda.frontend.onnx import ops  # noqa: F401  (registers the converters)
    from pybuda.frontend.onnx.functions import expand_functions

    config = config if config is not None else _get_global_compiler_config()
    label = name or "onnx_model"
    model = onnx_model.load(model_or_path, label)
    label = name or model.graph.name or "onnx_model"
    onnx_model.require_input_shapes(model, label)
    model = onnx_model.check_and_upgrade(model, label)
    arrays = [_as_numpy(s) for s in samples]
    bound = onnx_model.bind_inputs(model, arrays, label)
    # Function ops without a converter (Attention, RMSNormalization, the losses …) become their ONNX bodies.
    bound = expand_functions(bound, CONVERTERS)
    return _Importer(bound, arrays, label, config, for_device, set(bind_inputs), dict(host_nodes or {})).run()


class _Importer(SplitPlanner):
    def __init__(self, model: "onnx.ModelProto", samples: List[np.ndarray], name: str, config: Any, for_device: bool,
                 bind: Set[str], host_nodes: Optional[Dict[str, str]] = None):
        self.model = model
        self.host_nodes = host_nodes or {}
        self.name = name
        self.config = config
        self.for_device = for_device
        self.opset = onnx_model.default_opset(model)
        self.inputs = onnx_model.graph_inputs(model)
        self.feeds = {vi.name: s for vi, s in zip(self.inputs, samples)}
        self.bind = {n for n in bind if n in self.feeds}
        self.inits = onnx_model.initializer_values(model)
        self.nodes = list(model.graph.node)
        self.labels = self._labels()
        # Static shape/dtype of every value: shape inference, then the sample run for what it left open.
        inferred = onnx_model.infer_shapes(model, name)
        self.samples_run = onnx_model.probe(model, self.feeds)
        # ONNX element type of every value (torch has no dtype for some: float8, int4, strings; numpy holds bfloat16 through ml_dtypes).
        self.elem: Dict[str, int] = dict(onnx_model.value_types(model))
        self.elem.update({k: et for k, (_, et) in inferred.items()})
        for k, v in self.samples_run.items():
            # ONNX Runtime hands float8 values back as uint8 arrays: the declared type wins when there is one.
            if isinstance(v, np.ndarray) and k not in self.elem:
                try:
                    self.elem[k] = int(onnx.helper.np_dtype_to_tensor_dtype(v.dtype))
                except (KeyError, TypeError, ValueError):
                    pass
        self.info: Dict[str, Tuple[Optional[Tuple[int, ...]], Optional[torch.dtype]]] = {}
        for k, (shape, et) in inferred.items():
            self.info[k] = (shape, onnx_model.torch_dtype(et))
        self._learn(self.samples_run)
        # Exact-GELU chains of exporters without a Gelu op become the chip's gelu (see fusion.py).
        from pybuda.frontend.onnx.fusion import gelu_chains

        self.gelu_final = gelu_chains(self.nodes, self.inits, [o.name for o in model.graph.output])
        self.gelu_absorbed = {j: i for i, (_, chain) in self.gelu_final.items() for j in chain}
        self.b: OnnxBuilder
        self.graph: Graph
        self.folded: Set[int] = set()  # nodes evaluated at import time (set by run)
        self.const_values: Set[str] = set()  # values known at import time (set by run)

    def _learn(self, values: Mapping[str, Any]) -> None:
        """Static shape and dtype of every value of a sample run (``values``: name -> array) into ``info``."""
        for k, v in values.items():
            if isinstance(v, np.ndarray) and v.dtype != object:
                shape = tuple(int(d) for d in v.shape)
                if k in self.elem and onnx_model.torch_dtype(self.elem[k]) is None:
                    self.info[k] = (shape, None)  # e.g. float8 (which ONNX Runtime returns as uint8)
                    continue
                try:
                    self.info[k] = (shape, _to_torch(v.reshape(-1)[:0]).dtype)
                except TypeError:  # an element type torch lacks
                    self.info[k] = (shape, None)

    def _labels(self) -> List[str]:
        seen: Set[str] = set()
        out = []
        for i, node in enumerate(self.nodes):
            base = _safe(node.name) if node.name else f"{node.op_type.lower()}_{i}"
            cand, k = base, 1
            while cand in seen:
                cand, k = f"{base}_{k}", k + 1
            seen.add(cand)
            out.append(cand)
        return out

    # --- environment ---
    def _fresh(self) -> None:
        self.graph = Graph(self.name)
        self.b = OnnxBuilder(self.graph)

    def _not_batch_first(self, dev_inputs: Sequence[str], user_inputs: Sequence[str]) -> Set[str]:
        """The CPU stage's values for the device whose dim 0 cannot be the samples' (the torch frontend's rule,
        :func:`pybuda.frontend.fallback.off_batch`)."""
        def shapes(names):
            return {v: self.info[v][0] for v in names if self.info.get(v, (None, None))[0] is not None}
        return off_batch(shapes(user_inputs), shapes(dev_inputs))

    def _initial_env(self, device_inputs: Optional[Sequence[str]] = None, lead: Collection[str] = ()) -> Dict[str, Any]:
        env: Dict[str, Any] = {"": None}
        for k, arr in self.inits.items():
            try:
                t = _to_torch(arr)
            except TypeError:
                env[k] = Missing(f"initializer '{k}' has an element type the device cannot hold")
                continue
            env[k] = Param(t, _safe(k)) if t.dtype.is_floating_point else Const(t, _safe(k))
        for k in self.bind:
            env[k] = Const(_to_torch(self.feeds[k]), _safe(k))  # integer inputs only (the caller's choice)
        names = device_inputs if device_inputs is not None else [vi.name for vi in self.inputs if vi.name not in self.bind]
        for k in names:
            shape, dtype = self.info.get(k, (None, None))
            if shape is None or dtype is None:
                if device_inputs is not None:
                    raise CompileError(f"ONNX model '{self.name}': value '{k}' has no static shape or an element "
                                       f"type torch cannot hold", stage=STAGE)
                # e.g. bfloat16/float8/int4 inputs: only host nodes can read them.
                env[k] = Missing(f"input '{k}' has an element type the device cannot hold")
                continue
            if k in lead:  # arrives with a leading sample dim (see _not_batch_first)
                env[k] = add_sample_input(self.graph, _safe(k), shape, dtype)
                continue
            env[k] = self.graph.add_input(self.graph.unique_name(_safe(k)), shape, dtype).name
        return env

    def _fold(self, node: "onnx.NodeProto", ins: List[Any]) -> Optional[List[Any]]:
        """Evaluate a node whose inputs are all known now; None when it cannot be folded."""
        if node.op_type in NONDETERMINISTIC or node.domain not in ("", "ai.onnx"):
            return None
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            return None
        if not all(v is None or (isinstance(v, Const) and not isinstance(v, Param)) for v in ins):
            return None
        try:
            from onnx.reference import ReferenceEvaluator

            feeds = {n: v.value.numpy() for n, v in zip(node.input, ins) if n and v is not None}
            ref = ReferenceEvaluator(node, opsets={"": self.opset})
            outs = ref.run(None, feeds)
        except Exception as e:
            # onnx.reference lacks or mishandles some cases (GatherElements over more than 32 entries along its
            # axis fails in np.choose). Constant inputs have the same values in the sample run, so ONNX Runtime's
            # value of each output there is the folded value.
            outs = [self.samples_run.get(o) for o in node.output]
            if not node.output or any(o is None for o in outs):
                log.debug("folding %s failed: %s", node.op_type, e)
                return None  # let the converter (or the fallback) deal with it
        result = []
        for k, o in zip(node.output, outs):
            if not isinstance(o, np.ndarray) or o.dtype == object:
                return None
            try:
                result.append(Const(_to_torch(o), _safe(k)))
            except TypeError:
                return None
        return result

    def _convert(self, i: int, env: Dict[str, Any]) -> List[Any]:
        """Map node ``i``; returns its output values or raises Unsupported."""
        node = self.nodes[i]
        if i in self.gelu_absorbed:  # part of an exact-GELU chain: its last node computes the whole chain
            return [Missing(f"inside the GELU chain ending at {self.labels[i]}") for _ in node.output]
        if i in self.gelu_final and isinstance(env.get(self.gelu_final[i][0]), str):
            self.b.begin_onnx(node, self.labels[i])
            x = env[self.gelu_final[i][0]]
            if self.graph[x].dtype.is_floating_point and 0 not in self.graph[x].shape:
                out = self.b.op("gelu", [x], approximate="none")
                return [self.b.finish(self._conform(node.output[0], out))]
        return self._convert_node(node, self.labels[i], env)

    def _convert_node(self, node: "onnx.NodeProto", label: str, env: Mapping[str, Any]) -> List[Any]:
        """Map ``node`` (a model node, or one of an inlined If branch) with the values ``env``."""
        ins = []
        for n in node.input:
            if n not in env:
                raise Unsupported(f"uses '{n}', which is not available here")
            v = env[n]
            if isinstance(v, Missing):
                raise Unsupported(f"uses a value pybuda does not compute ({v.reason})")
            if isinstance(v, str) and 0 in self.graph[v].shape:
                raise Unsupported("zero-size tensors are not supported on the device")
            ins.append(v)
        empty = self._empty_outputs(node)
        if empty is not None:
            return empty
        if node.op_type == "If" and node.domain in ("", "ai.onnx") and isinstance(ins[0], Const) \
                and not isinstance(ins[0], Param) and ins[0].value.numel() == 1:
            return self._inline_if(node, label, bool(ins[0].value.reshape(-1)[0]), env)
        folded = self._fold(node, ins)
        if folded is not None:
            return folded
        if node.domain not in ("", "ai.onnx"):
            raise Unsupported(f"op domain '{node.domain}' has no mapping")
        fn = CONVERTERS.get(node.op_type)
        if fn is None:
            raise Unsupported("no mapping to a pybuda op")
        self.b.begin_onnx(node, label)
        ctx = NodeCtx(self, node, label, ins)
        try:
            out = fn(ctx)
        except Unsupported:
            raise
        except OnnxAttributeError:
            raise
        except Exception as e:  # a registry op rejected the call (OpError) or a converter bug
            raise Unsupported(f"mapping failed: {e}") from None
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        if len(outs) < len([o for o in node.output if o]):
            outs += [Missing(f"output {k} of {node.op_type}") for k in range(len(outs), len(node.output))]
        outs = [self._conform(node.output[k], v) for k, v in enumerate(outs[:len(node.output)])]
        if outs and isinstance(outs[0], str):
            outs[0] = self.b.finish(outs[0])  # the op producing the node's value takes the node's name
        return outs

    def _empty_outputs(self, node: "onnx.NodeProto") -> Optional[List[Const]]:
        """A node whose every output is zero-size (Phi-3's ``q[..., rotary_dim:]`` with a full rotary dim) computes
        no value: its outputs are constants of their shape and dtype, which a Concat drops; None otherwise."""
        outs = []
        for o in node.output:
            shape, dtype = self.info.get(o, (None, None)) if o else (None, None)
            if shape is None or dtype is None or 0 not in shape:
                return None
            outs.append(Const(torch.empty(shape, dtype=dtype), _safe(o)))
        return outs or None

    def _inline_if(self, node: "onnx.NodeProto", label: str, cond: bool, env: Mapping[str, Any]) -> List[Any]:
        """An If whose condition is known at import time (the TorchScript exporter's rank and size checks, e.g.
        around Tile and diagonal) is the branch it takes: its nodes are mapped in place, reading the outer
        values, so the If neither runs on the host nor keeps what follows it there."""
        branch = next(onnx.helper.get_attribute_value(a) for a in node.attribute
                      if a.name == ("then_branch" if cond else "else_branch"))
        self._probe_branch(branch)
        local: Dict[str, Any] = dict(env)
        for t in branch.initializer:
            value = _to_torch(onnx.numpy_helper.to_array(t))
            local[t.name] = Param(value, _safe(t.name)) if value.dtype.is_floating_point else Const(value, _safe(t.name))
        side = "then" if cond else "else"
        for k, sub in enumerate(branch.node):
            local.update(zip(sub.output, self._convert_node(sub, f"{label}.{side}_{k}", local)))
        if len(branch.output) != len(node.output) or any(o.name not in local for o in branch.output):
            raise Unsupported(f"the {side} branch does not compute the If's {len(node.output)} output(s)")
        return [self._conform(o, local[b.name]) for o, b in zip(node.output, branch.output)]

    def _probe_branch(self, branch: "onnx.GraphProto") -> None:
        """The shapes and dtypes of an If branch's values (converters read them; the model's probe sees no value
        inside a subgraph): the branch as a model of the outer values it reads, run on their sample values."""
        if all(o in self.info for sub in branch.node for o in sub.output if o):
            return
        local = {t.name for t in branch.initializer}
        outer: List[str] = []
        for sub in branch.node:
            outer += [n for n in self._reads(sub) if n not in local and n not in outer]
            local |= set(sub.output)
        feeds = {n: self.samples_run[n] if n in self.samples_run else self.inits.get(n) for n in outer}
        if any(not isinstance(v, np.ndarray) for v in feeds.values()):
            return  # an outer value without a sample: converters that need shapes refuse, the If runs on the host
        inputs = [onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
                  for n, v in feeds.items()]
        graph = onnx.helper.make_graph(list(branch.node), "branch", inputs, [], list(branch.initializer))
        model = onnx.helper.make_model(graph, opset_imports=list(self.model.opset_import))
        model.ir_version = self.model.ir_version
        self._learn(onnx_model.probe(model, feeds))

    def _conform(self, name: str, value: Any) -> Any:
        """Check a converter's result against the static shape/dtype ONNX says it has."""
        if isinstance(value, Missing) or value is None:
            return value
        expected = self.info.get(name)
        if expected is None or expected[0] is None:
            return value
        shape, dtype = expected
        if 0 in shape and not isinstance(value, Const):
            raise Unsupported("zero-size tensors are not supported on the device")
        if isinstance(value, Const):
            v = value.value
            if tuple(v.shape) != shape and v.numel() == math.prod(shape):
                v = v.reshape(shape)
            if dtype is not None and v.dtype != dtype:
                v = v.to(dtype)
            if tuple(v.shape) != shape:
                raise Unsupported(f"internal mapping error: computed shape {list(v.shape)}, ONNX says {list(shape)}")
            return Const(v, value.name) if v is not value.value else value
        name_ = self.b.tensor(value)
        have = self.graph[name_].shape
        if have != shape:
            if math.prod(have) != math.prod(shape):
                raise Unsupported(f"internal mapping error: pybuda computes shape {list(have)}, ONNX says {list(shape)}")
            name_ = self.b.reshape(name_, shape)
        if dtype is not None and self.graph[name_].dtype != dtype:
            name_ = self.b.cast(name_, dtype)
        return name_

    def _standins(self, i: int) -> List[Any]:
        out = []
        for k in self.nodes[i].output:
            shape, dtype = self.info.get(k, (None, None))
            if shape is None or dtype is None or 0 in shape:
                out.append(Missing(f"result of host node {self.labels[i]}"))
            else:
                out.append(self.graph.add_input(self.graph.unique_name(f"host.{_safe(k)}"), shape, dtype).name)
        return out

    def _device_reason(self, created: Sequence[str]) -> Optional[str]:
        from pybuda.passes.lower.capabilities import unsupported_reason

        for n in created:
            node = self.graph.nodes.get(n)
            if node is not None and node.kind == OP:
                reason = unsupported_reason(self.graph, node)
                if reason is not None:
                    return reason
        return None

    # --- main ---
    def run(self) -> OnnxCapture:
        enabled, names = _fallback_set(self.config)
        self._fresh()
        env = self._initial_env()
        host: Dict[int, str] = {}
        unsupported: Dict[int, str] = {}
        folded: Set[int] = set()
        self.folded = folded  # filled as the walk goes (read by coverage.device_mappable)
        for i, node in enumerate(self.nodes):
            before = len(self.graph.nodes)
            try:
                outs = self._convert(i, env)
            except Unsupported as e:
                unsupported[i] = str(e)
                env.update(zip(node.output, self._standins(i)))
                continue
            env.update(zip(node.output, outs))
            created = list(self.graph.nodes)[before:]
            if all(isinstance(v, Const) or v is None for v in outs) and not any(
                    self.graph[c].kind == OP for c in created):
                folded.add(i)
                continue
            forced = self.host_nodes.get(self.labels[i]) or (node.name and self.host_nodes.get(node.name))
            if forced:
                unsupported[i] = forced
                continue
            if self.for_device:
                reason = self._device_reason(created)
                if reason is not None:
                    unsupported[i] = reason
                    continue
            if enabled and names:
                hit = node.op_type if node.op_type in names else next((t for t in self.b.op_types if t in names), None)
                if hit is not None:
                    host[i] = f"'{hit}' is in cpu_fallback_ops"

        # Values known at import time, for :func:`pybuda.frontend.onnx.coverage.device_mappable`.
        self.const_values = {k for k, v in env.items() if isinstance(v, Const) and not isinstance(v, Param)}
        for i, (_, chain) in self.gelu_final.items():
            if i in unsupported:  # the chain runs as its original nodes on the host, all of them
                unsupported.update({j: f"part of the GELU chain ending at {self.labels[i]}, which runs on the host"
                                    for j in chain})
        if unsupported and not enabled:
            raise UnsupportedOpError([UnsupportedOp(f"{self.nodes[i].op_type} (node '{self.nodes[i].name or self.labels[i]}')",
                                                    f"onnx node #{i}", r) for i, r in unsupported.items()])
        host.update(unsupported)
        compute = [i for i in range(len(self.nodes)) if i not in folded]
        consts = {k: v for k, v in env.items() if isinstance(v, Const) and not isinstance(v, Param)}
        outputs = [o.name for o in self.model.graph.output]
        out_dtypes = [onnx_model.np_dtype(o.type.tensor_type.elem_type)
                      if o.type.HasField("tensor_type") and o.type.tensor_type.elem_type else None
                      for o in self.model.graph.output]
        user_inputs = [vi.name for vi in self.inputs if vi.name not in self.bind]
        base = dict(input_names=user_inputs, output_names=outputs,
                    bound_inputs={k: self.feeds[k] for k in self.bind}, output_dtypes=out_dtypes,
                    all_inputs=[vi.name for vi in self.inputs], node_labels=list(self.labels))
        if not host:
            blocked = next((r for r in map(self._cannot_cross, list(user_inputs) + list(outputs)) if r), None)
            if blocked is not None:
                return self._host_only(compute, host, blocked, enabled, user_inputs, outputs, base)
            self._add_outputs(outputs, env)
            self.graph.eliminate_dead_code()
            report = FallbackReport(self.name, enabled, device_ops=len(compute))
            return OnnxCapture(self.graph, report, None, None, **base)

        host = {i: host[i] for i in sorted(host)}
        blocked = None
        for force in (None, POST, PRE):
            stage, decisions = self._partition(compute, host, force)
            pre_nodes = [i for i in compute if stage[i] == PRE]
            dev_nodes = [i for i in compute if stage[i] == DEVICE]
            post_nodes = [i for i in compute if stage[i] == POST]
            dev_inputs, dev_outputs = self._plan(stage, pre_nodes, dev_nodes, post_nodes, consts, outputs, user_inputs)
            # No node on the device: as in the torch frontend, the device graph passes the CPU stage's values
            # through (a model of host-only ops still runs, with its fallback report).
            blocked = next((r for r in map(self._cannot_cross, list(dev_inputs) + list(dev_outputs)) if r), None)
            if blocked is None:
                break
        if blocked is not None:
            return self._host_only(compute, host, blocked, enabled, user_inputs, outputs, base)

        from pybuda.frontend.onnx.stages import build_stage

        pre = post = None
        host_inits: Set[str] = set()
        lead: Set[str] = set()
        if pre_nodes:
            lead = self._not_batch_first(dev_inputs, user_inputs)
            pre = build_stage(self, pre_nodes, user_inputs, dev_inputs, consts, f"{self.name}_cpu_pre", lead=lead)
            host_inits |= set(pre.initializers)
        if post_nodes:
            post = build_stage(self, post_nodes, dev_outputs, outputs, consts, f"{self.name}_cpu_post")
            host_inits |= set(post.initializers)

        self._fresh()
        env = self._initial_env(dev_inputs, lead)
        env.update(consts)
        for i in dev_nodes:
            try:
                env.update(zip(self.nodes[i].output, self._convert(i, env)))
            except Unsupported as e:
                raise CompileError(f"mapping ONNX node '{self.labels[i]}' ({self.nodes[i].op_type}) failed after the "
                                   f"CPU fallback split: {e}", stage=STAGE, op=self.labels[i]) from None
        self._add_outputs(dev_outputs, env)
        self.graph.eliminate_dead_code()
        device_params = {n.name for n in self.graph.parameters}
        shared = sorted(k for k in host_inits if k in self.inits and _safe(k) in device_params)
        report = FallbackReport(self.name, enabled, decisions, self._describe(pre_nodes), self._describe(post_nodes),
                                len(dev_nodes), shared)
        if not warn_if_large(report):
            log.info("%s", report)
        return OnnxCapture(self.graph, report, pre, post, **base)

    def _host_only(self, compute: List[int], host: Mapping[int, str], blocked: str, enabled: bool,
                   user_inputs: List[str], outputs: List[str], base: Dict[str, Any]) -> OnnxCapture:
        """The whole model as one CPU stage: no split leaves only device-ready values between the stages."""
        from pybuda.frontend.onnx.stages import build_stage

        stage = build_stage(self, list(range(len(self.nodes))), user_inputs, outputs, {}, f"{self.name}_cpu")
        why = (f"the model runs on the host: {blocked}" if not blocked.startswith("'") else
               f"the model runs on the host: {blocked} but would cross the device")
        decisions = [FallbackOp(self.labels[u], self.nodes[u].op_type, f"onnx node #{u}", r, PRE, len(compute) - 1)
                     for u, r in host.items()]
        report = FallbackReport(self.name, enabled, decisions, self._describe(compute), [], 0, [])
        log.warning("ONNX model '%s': %s", self.name, why)
        self._fresh()
        return OnnxCapture(self.graph, report, None, None, host=stage, host_reason=why, **base)

    def _add_outputs(self, outputs: Sequence[str], env: Mapping[str, Any]) -> List[str]:
        names = []
        self.b.node = None
        for o in outputs:
            value = env.get(o)
            if isinstance(value, Missing) or value is None:
                raise CompileError(f"ONNX model '{self.name}': output '{o}' is a value pybuda does not compute"
                                   f"{' (' + value.reason + ')' if isinstance(value, Missing) else ''}", stage=STAGE)
            src = self.b.tensor(value)
            if self.graph[src].kind != OP:
                src = self.graph.add_op(self.graph.unique_name(f"{_safe(o)}.passthrough"), "nop", [src]).name
            names.append(self.graph.add_output(self.graph.unique_name(f"{self.name}.output_{_safe(o)}"), src).name)
        return names


def _fallback_set(config: Any) -> Tuple[bool, Set[str]]:
    from pybuda.frontend.torch import _fallback_set as torch_fallback_set

    return torch_fallback_set(config)
