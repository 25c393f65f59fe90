"""Optimizers: SGD, Adam, AdamW, LAMB and LARS, in two forms each.

* **The device form** — :meth:`Optimizer.build_update_graph` returns an :class:`UpdateGraph`: one
  :class:`~pybuda.ir.graph.Graph` that takes the gradient of every trained parameter (inputs
  ``grad.<param>``), reads the parameters, the optimizer state (``<param>.mean``, ...) and the
  hyper-parameters (``lr``) as graph parameters, and outputs the new parameters and the new state. It uses
  only registry ops a chip can run: elementwise math with scalar broadcasting, and ``reduce_sum`` one dim
  at a time for the LAMB/LARS norms. Each optimizer writes its update rule once, in
  :meth:`Optimizer.generate_op_trace`, against a small context object (:class:`OptimizerTraceContext`).
* **The torch form** — :meth:`Optimizer.get_pytorch_optimizer` returns a real ``torch.optim.Optimizer``
  with the same trajectory: ``torch.optim.SGD``/``Adam``/``AdamW`` where they match, else the "torch
  golden twins" of :mod:`pybuda.torch_optimizers` (:class:`TorchAdamNoBiasCorrection`, :class:`TorchLAMB`, :class:`TorchLARS`), written
  independently from the published rules so they check the graph form.

The learning rate is a graph *parameter* (a (1, 1) tensor) rather than a constant, so a scheduler
(:mod:`pybuda.schedulers`) changes it between steps without rebuilding or recompiling the graph; the
other coefficients (betas, epsilon, weight decay, ...) are compile-time constants.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Type, Union

import torch

from pybuda.dtypes import DataFormat
from pybuda.errors import ConfigError
from pybuda.ir.graph import Graph
from pybuda.netlist.host_io import compact_shape
from pybuda.torch_optimizers import TorchAdamNoBiasCorrection, TorchLAMB, TorchLARS

Shape = Tuple[int, ...]
ParamSpec = Tuple[Sequence[int], torch.dtype]

#: Prefix of the update graph's gradient inputs: ``grad.<parameter name>``.
GRAD_PREFIX = "grad."
#: Suffix of the update graph's output nodes: ``<parameter>.new`` and ``<state>.new``.
OUTPUT_SUFFIX = ".new"

__all__ = [
    "Optimizer", "SGD", "Adam", "AdamW", "LAMB", "LARS", "UpdateGraph", "OptimizerTraceContext",
    "TorchAdamNoBiasCorrection", "TorchLAMB", "TorchLARS", "get_optimizer_type_from_string",
    "OPTIMIZER_TYPES",
]


# --- argument checks ----------------------------------------------------------------------------------------


def _number(owner: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
        raise ConfigError(f"{owner}: {name} must be a finite number, got {value!r}")
    return float(value)


def _non_negative(owner: str, name: str, value: Any) -> float:
    v = _number(owner, name, value)
    if v < 0:
        raise ConfigError(f"{owner}: {name} must be >= 0, got {value!r}")
    return v


def _beta(owner: str, name: str, value: Any) -> float:
    v = _number(owner, name, value)
    if not 0.0 <= v < 1.0:
        raise ConfigError(f"{owner}: {name} must be in [0, 1), got {value!r}")
    return v


def _flag(owner: str, name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{owner}: {name} must be True or False, got {value!r}")
    return value


def _check_lr(owner: str, value: Any) -> float:
    if value is None:
        raise ConfigError(f"{owner}: learning_rate is required")
    return _non_negative(owner, "learning_rate", value)


# --- decayed state and the formats that carry it -------------------------------------------------------

#: The largest relative error :meth:`UpdateGraph.imprecise_state` lets a format put on a decayed state's
#: per-step change ``1 − β``. An error there compounds: it is the error of the moment's time constant (at
#: 10 %, an SGD momentum of 0.9 acts like one of 0.89, within what bfloat16 training tolerates) and, for
#: Adam's ``β2^t``, of the bias correction itself.
DECAY_TOLERANCE = 0.1


def decay_error(beta: float, df: DataFormat) -> float:
    """Worst relative error of the per-step change ``(1 − β)·x`` of a state ``x ← β·x`` computed or stored
    in format ``df``: the rounding of the new value, one unit in its last place (the packer truncates), is
    up to ``2^-m·x`` for ``m`` mantissa bits (Float32 23, Float16 10, Float16_b 7), against a change of
    ``(1 − β)·x``. At Float16_b, β2 = 0.999's change is 0.001·x against a unit of up to 0.0078·x: the
    variance stops decaying (or decays 8x too fast) and ``1 − β2^t`` is off by up to 8x. 0 for β = 0 (no
    state kept); infinite for an integer format."""
    from pybuda.golden.formats import format_info

    info = format_info(df)
    if info.is_integer:
        return math.inf
    return 0.0 if beta <= 0 else 2.0 ** -info.man_bits / (1.0 - beta)


# --- the update graph ---------------------------------------------------------------------------------------


@dataclass
class UpdateGraph:
    """One optimizer step for a set of parameters, as a single graph.

    Node naming (all names are stable, so a runtime can bind queues by name):

    * inputs ``grad.<param>``, one per parameter, in the order the parameters were given;
    * graph parameters: each model parameter under its own name (the stored value is zeros; the real
      value is supplied at run time), each state tensor ``<param>.<key>`` (``key`` in
      :meth:`Optimizer.get_optimizer_state_keys`, e.g. ``mean``, ``variance``, ``beta1_pow``,
      ``momentum``), and each hyper-parameter under its key (``lr``: shape (1, 1), float32);
    * constants ``const.<value>.r<rank>.<dtype>`` (shape ``(1,)*rank``, shared by parameters of the same
      rank and dtype), ops ``<param>.opt<N>.<op type>``, and views of a hyper-parameter for parameters it
      would not broadcast against as is: ``<hyper>.r<rank>`` (a reshape, for rank 0 and 1) and
      ``<hyper>.r<rank>.<dtype>`` (a cast, for non-float32 parameters);
    * outputs ``<param>.new`` for every parameter (in order), then ``<state>.new`` for every state tensor.

    Fields: ``graph``; ``param_names`` (order of the ``grad.*`` inputs and of the parameter outputs);
    ``grad_inputs`` (param → input node); ``param_outputs`` (param → output node); ``state_outputs``
    (state name → output node); ``state_names`` (state name → param it belongs to); ``hyper_names``.
    """

    graph: Graph
    optimizer: "Optimizer"
    param_names: List[str]
    grad_inputs: Dict[str, str]
    param_outputs: Dict[str, str]
    state_outputs: Dict[str, str]
    state_names: Dict[str, str]
    hyper_names: List[str]
    #: Gradients read in another layout than their parameter's: param -> (input shape, TMs to the parameter).
    grad_layouts: Dict[str, Tuple[Tuple[int, ...], Tuple[Tuple[str, Dict[str, Any]], ...]]] = field(
        default_factory=dict)
    _initial_state: Dict[str, torch.Tensor] = field(default_factory=dict, repr=False)
    #: State tensors the rule decays each step, ``x ← β·x`` (a moment, a momentum buffer, a ``β^t`` power):
    #: state name -> β. See :meth:`imprecise_state`.
    state_decays: Dict[str, float] = field(default_factory=dict)

    def imprecise_state(self, formats: Mapping[str, Sequence[DataFormat]],
                        tolerance: float = DECAY_TOLERANCE) -> List[Tuple[str, float, DataFormat, float]]:
        """The decayed state tensors whose per-step change ``1 − β`` the given formats cannot carry:
        ``(state, β, format, error)`` for each whose :func:`decay_error` in the least precise of its
        ``formats`` (state name -> the formats its update passes through: the Dest format it is computed in,
        the format it is stored in) exceeds ``tolerance``."""
        out = []
        for state, beta in self.state_decays.items():
            dfs = [DataFormat.from_json(df) for df in formats.get(state, ())]
            if not dfs:
                continue
            worst = max(dfs, key=lambda df: decay_error(beta, df))
            err = decay_error(beta, worst)
            if err > tolerance:
                out.append((state, beta, worst, err))
        return out

    def initial_state(self) -> Dict[str, torch.Tensor]:
        """Fresh values for every state tensor (zeros for moments, ones for the ``beta^t`` powers)."""
        return {k: v.clone() for k, v in self._initial_state.items()}

    def state_shapes(self) -> Dict[str, Tuple[int, ...]]:
        """The shape of every state tensor (without copying their initial values)."""
        return {k: tuple(v.shape) for k, v in self._initial_state.items()}

    def hyperparameters(self) -> Dict[str, torch.Tensor]:
        """The hyper-parameter tensors at their *current* values (after any scheduler step)."""
        return self.optimizer._hyper_values()

    def inputs(self, gradients: Mapping[str, torch.Tensor]) -> List[torch.Tensor]:
        """The graph's inputs (gradients) in order, from a ``{param: gradient}`` mapping."""
        missing = [p for p in self.param_names if p not in gradients]
        if missing:
            raise ConfigError(f"update graph: no gradient for parameter(s) {missing}")
        return [self._as_input(p, gradients[p]) for p in self.param_names]

    def _as_input(self, param: str, gradient: torch.Tensor) -> torch.Tensor:
        """A gradient in its parameter's shape, reshaped to the graph input of a parameter held compact (a
        layout that is a plain reshape, ``host_io.compact_shape``); any other gradient as it is."""
        shape = tuple(self.graph[self.grad_inputs[param]].shape)
        layout = self.grad_layouts.get(param)
        if tuple(gradient.shape) != shape and layout is not None and not layout[1] and gradient.numel() == math.prod(shape):
            return gradient.reshape(shape)
        return gradient

    def parameter_values(self, parameters: Mapping[str, torch.Tensor],
                         state: Mapping[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """The values of all graph parameters (model parameters, state, hyper-parameters) for one run."""
        values: Dict[str, torch.Tensor] = {}
        for p in self.param_names:
            if p not in parameters:
                raise ConfigError(f"update graph: no value for parameter '{p}'")
            values[p] = parameters[p]
        for s in self.state_outputs:
            if s not in state:
                raise ConfigError(f"update graph: no value for optimizer state '{s}'")
            values[s] = state[s]
        values.update(self.hyperparameters())
        return values

    def split_outputs(self, outputs: Sequence[torch.Tensor]
                      ) -> Tuple[Dict[str, torch.Tensor], Dict[str, torch.Tensor]]:
        """``(new parameters, new state)`` from the graph's output list."""
        n = len(self.param_names)
        new_params = dict(zip(self.param_names, outputs[:n]))
        new_state = dict(zip(self.state_outputs, outputs[n:]))
        return new_params, new_state

    def step(self, parameters: Mapping[str, torch.Tensor], gradients: Mapping[str, torch.Tensor],
             state: Mapping[str, torch.Tensor]) -> Tuple[Dict[str, torch.Tensor], Dict[str, torch.Tensor]]:
        """Run one update on the CPU interpreter: ``(new parameters, new state)``."""
        from pybuda.verify import run_graph_on_cpu

        outputs = run_graph_on_cpu(self.graph, self.inputs(gradients), self.parameter_values(parameters, state))
        return self.split_outputs(outputs)


def _scalar_shape(rank: int) -> Shape:
    return (1,) * rank


def _const_label(value: float) -> str:
    return repr(float(value))


class _UpdateGraphBuilder:
    """Shared pieces of one update graph: constants, hyper-parameter views, the state registry."""

    def __init__(self, optimizer: "Optimizer", graph: Graph):
        self.optimizer = optimizer
        self.graph = graph
        self.views: Dict[Tuple[str, int, torch.dtype], str] = {}
        self.initial_state: Dict[str, torch.Tensor] = {}
        self.state_owner: Dict[str, str] = {}
        self.state_next: Dict[str, str] = {}
        self.decays: Dict[str, float] = {}

    def constant(self, value: float, rank: int, dtype: torch.dtype) -> str:
        name = f"const.{_const_label(value)}.r{rank}.{str(dtype).replace('torch.', '')}"
        if name not in self.graph:
            self.graph.add_constant(name, torch.full(_scalar_shape(rank), float(value), dtype=dtype))
        return name

    def hyper(self, key: str, rank: int, dtype: torch.dtype) -> str:
        if key not in self.graph:
            raise ConfigError(f"{type(self.optimizer).__name__}: unknown hyper-parameter '{key}'; "
                              f"known: {self.optimizer._hyper_keys()}")
        cache = (key, rank, dtype)
        if cache in self.views:
            return self.views[cache]
        node = key
        base = self.graph[key]
        if rank < len(base.shape):  # (1, 1) already broadcasts against rank >= 2 without raising the rank
            name = self.graph.unique_name(f"{key}.r{rank}")
            node = self.graph.add_op(name, "reshape", [node], {"shape": _scalar_shape(rank)}).name
        if dtype != base.dtype:
            name = self.graph.unique_name(f"{key}.r{rank}.{str(dtype).replace('torch.', '')}")
            node = self.graph.add_op(name, "cast", [node], {"dtype": str(dtype).replace("torch.", "")}).name
        self.views[cache] = node
        return node



def _grad_layout(owner: str, pname: str, value: Any) -> Tuple[Tuple[int, ...], Tuple[Tuple[str, Dict[str, Any]], ...]]:
    """A ``grad_layouts`` entry as ``(shape, ((op_type, attrs), ...))``; ConfigError for TMs other than
    reshape and transpose."""
    value = tuple(value)
    if value and isinstance(value[0], (tuple, list)):
        shape, tms = tuple(int(d) for d in value[0]), tuple((str(op), dict(attrs)) for op, attrs in value[1])
    else:
        shape, tms = tuple(int(d) for d in value), ()
    bad = [op for op, _ in tms if op not in ("reshape", "transpose")]
    if bad:
        raise ConfigError(f"{owner}: the gradient of '{pname}' can be read through reshapes and transposes only, "
                          f"not {bad}")
    return shape, tms

class OptimizerTraceContext:
    """What :meth:`Optimizer.generate_op_trace` writes an update rule against (one per parameter).

    ``op(type, operands, attrs)`` adds a registry op and returns its node name; ``constant(v)`` a scalar
    constant shaped to broadcast against the parameter; ``hyper(key)`` the hyper-parameter (``lr``) the
    same way; ``state(key, init, scalar)`` declares a state tensor ``<param>.<key>`` (parameter-shaped,
    or scalar-shaped with ``scalar=True``) initialised to ``init``; ``loopback(new, state)`` says which node
    is the state's next value; ``norm(x)`` is the L2 norm of ``x`` as a scalar-shaped node.
    """

    def __init__(self, builder: _UpdateGraphBuilder, parameter: str, shape: Shape, dtype: torch.dtype):
        self._b = builder
        self.parameter_name = parameter
        self.parameter_shape = tuple(shape)
        self.dtype = dtype
        self.rank = len(shape)
        self._count = 0

    @property
    def graph(self) -> Graph:
        return self._b.graph

    def shape(self, node: str) -> Shape:
        return tuple(self._b.graph[node].shape)

    def op(self, op_type: str, operands: Sequence[str], attrs: Optional[Mapping[str, Any]] = None) -> str:
        name = f"{self.parameter_name}.opt{self._count}.{op_type}"
        self._count += 1
        return self._b.graph.add_op(self._b.graph.unique_name(name), op_type, list(operands), attrs).name

    def constant(self, value: float) -> str:
        return self._b.constant(value, self.rank, self.dtype)

    def hyper(self, key: str) -> str:
        return self._b.hyper(key, self.rank, self.dtype)

    def state(self, key: str, init: float = 0.0, scalar: bool = False) -> str:
        name = f"{self.parameter_name}.{key}"
        shape = _scalar_shape(self.rank) if scalar else self.parameter_shape
        value = torch.full(shape, float(init), dtype=self.dtype)
        self._b.graph.add_parameter(name, torch.zeros_like(value), requires_grad=False)
        self._b.initial_state[name] = value
        self._b.state_owner[name] = self.parameter_name
        return name

    def loopback(self, new_value: str, state: str) -> None:
        if state not in self._b.state_owner:
            raise ConfigError(f"loopback: '{state}' is not a state tensor declared with state()")
        if self.shape(new_value) != self.shape(state):
            raise ConfigError(f"loopback: new value of '{state}' has shape {self.shape(new_value)}, "
                              f"expected {self.shape(state)}")
        self._b.state_next[state] = new_value

    # --- small helpers built from the primitives above ------------------------------------------------
    def norm(self, x: str) -> str:
        """sqrt(sum(x^2)), reduced one dim at a time (shape (1,)*rank, broadcastable against x)."""
        node = self.op("square", [x])
        for dim in range(self.rank):
            node = self.op("reduce_sum", [node], {"dim": dim})
        return self.op("sqrt", [node])

    def scale(self, x: str, value: float) -> str:
        """x * value (x itself when value is 1). A factor in [0.5, 1) (a moment's β, a momentum) is applied
        as ``x - x * (1 - value)``: the multiplier reads its operands through source registers of 10
        mantissa bits or fewer, which turn β2 = 0.999 into 0.998 and so double 1 - β2 (Adam's steps came
        out 20 % long), while a subtraction is exact and the truncation then touches only the small
        product. Scaling a state tensor by a factor below 1 records it as decayed
        (:attr:`UpdateGraph.state_decays`): decay state through here, so that the compiler can check that
        the device's formats carry ``1 − β``."""
        value = float(value)
        if value == 1.0:
            return x
        if x in self._b.state_owner and 0.0 <= value < 1.0:  # a decayed state: its format must carry 1 − β
            self._b.decays[x] = max(value, self._b.decays.get(x, 0.0))
        if 0.5 <= value < 1.0:
            return self.op("subtract", [x, self.op("multiply", [x, self.constant(1.0 - value)])])
        return self.op("multiply", [x, self.constant(value)])

    def positive(self, x: str) -> str:
        """1 where x > 0 else 0."""
        return self.op("greater", [x, self.constant(0.0)])

    def safe_divide(self, num: str, den: str, mask: str) -> str:
        """num / den where mask else undefined-but-finite (den replaced by 1): never 0/0 on any branch."""
        safe = self.op("where", [mask, den, self.constant(1.0)])
        return self.op("divide", [num, safe])


# --- the optimizers -----------------------------------------------------------------------------------------


class Optimizer:
    """Base class. Subclasses implement :meth:`generate_op_trace` and :meth:`get_pytorch_optimizer`.

    ``parameters`` (pybuda ``Parameter`` objects or names) are the ones to train; with
    ``device_params=True`` they are instead taken from the device's module at compile time
    (:meth:`set_parameters_to_optimize`).
    """

    #: The string in :func:`get_optimizer_type_from_string`.
    type_name = "optimizer"

    def __init__(self, device_params: bool = False):
        self.device_params = _flag(type(self).__name__, "device_params", device_params)
        self.learning_rate: float = 0.0
        self._params: Dict[str, Optional[Tuple[Shape, torch.dtype]]] = {}
        self._torch_golden: Dict[str, Tuple[torch.Tensor, torch.optim.Optimizer]] = {}

    # --- parameters ---------------------------------------------------------------------------------
    def set_parameters_to_optimize(self, parameters: Optional[Iterable[Any]]) -> None:
        """Train these parameters: pybuda ``Parameter`` objects (shape known) or names."""
        self._params = {}
        if parameters is None:
            return
        if isinstance(parameters, (str, bytes)) or not isinstance(parameters, Iterable):
            raise ConfigError(f"{type(self).__name__}: parameters must be a list of Parameters or names, "
                              f"got {parameters!r}")
        for p in parameters:
            if isinstance(p, str):
                self._params.setdefault(p, None)
            elif hasattr(p, "get_name") and hasattr(p, "shape"):
                dims = getattr(p.shape, "dims", p.shape)
                self._params[p.get_name()] = (tuple(int(d) for d in dims), getattr(p, "dtype", torch.float32))
            else:
                raise ConfigError(f"{type(self).__name__}: a parameter to optimize must be a pybuda "
                                  f"Parameter or a name, got {type(p).__name__}")

    @property
    def parameter_names(self) -> List[str]:
        return list(self._params)

    # --- hyper-parameters ---------------------------------------------------------------------------
    def _hyper_keys(self) -> List[str]:
        return ["lr"]

    def _hyper_values(self) -> Dict[str, torch.Tensor]:
        return {"lr": torch.tensor([[self.learning_rate]], dtype=torch.float32)}

    def set_optimizer_parameters(self, learning_rate: Optional[float] = None) -> None:
        """Change the learning rate (what a scheduler does); takes effect at the next step without a
        rebuild, in update graphs and in torch optimizers made by :meth:`torch_parameter_update`."""
        if learning_rate is not None:
            self.learning_rate = _check_lr(type(self).__name__, learning_rate)
            for _, opt in self._torch_golden.values():
                for group in opt.param_groups:
                    group["lr"] = self.learning_rate

    def get_optimizer_state_keys(self) -> List[str]:
        """Per-parameter state tensor keys (``<param>.<key>`` in the update graph), e.g. mean, variance."""
        ug = self.build_update_graph({"p": ((1, 1), torch.float32)})
        return [s[len("p."):] for s in ug.state_outputs]

    def get_optimizer_params(self, param_name: str, is_buda: bool = False) -> Optional[Dict[str, torch.Tensor]]:
        """The optimizer inputs of one parameter: hyper-parameters (``lr``) and, when the parameter's shape
        is known, the initial state tensors keyed by state key. None for a parameter not optimized.
        ``is_buda`` is accepted for API compatibility (the tensors are the same)."""
        if self._params and param_name not in self._params:
            return None
        out: Dict[str, torch.Tensor] = dict(self._hyper_values())
        spec = self._params.get(param_name)
        if spec is not None:
            ug = self.build_update_graph({param_name: spec})
            prefix = param_name + "."
            out.update({k[len(prefix):]: v for k, v in ug.initial_state().items()})
        return out

    def get_param_dict(self) -> Dict[str, Dict[str, torch.Tensor]]:
        """``{param: {key: tensor}}``: the optimizer inputs pushed to the device for every parameter."""
        return {name: self.get_optimizer_params(name, True) or {} for name in self._params}

    def to_config(self) -> Dict[str, Any]:
        """``{"type": <string>, "params": {...}}``, the form VerifyConfig and device images store."""
        return {"type": self.type_name, "params": dict(self._config())}

    def _config(self) -> Dict[str, Any]:
        return {"learning_rate": self.learning_rate}

    # --- the device form ----------------------------------------------------------------------------
    def generate_op_trace(self, ac: OptimizerTraceContext, parameter: str, gradient: str) -> str:
        """Emit the update of one parameter through ``ac``; return the node holding its new value."""
        raise NotImplementedError

    def build_update_graph(self, params: Optional[Mapping[str, ParamSpec]] = None,
                           name: Optional[str] = None,
                           grad_layouts: Optional[Mapping[str, Shape]] = None) -> UpdateGraph:
        """One graph updating every parameter in ``params`` (``{name: (shape, dtype)}``, in order);
        defaults to the parameters set with :meth:`set_parameters_to_optimize` (their shapes must be known).
        ``grad_layouts``: where a parameter's gradient input is not in the parameter's shape (the layout a
        backward program writes it in, so that the gradient can stay on the device), its shape, or a pair
        ``(shape, [(op_type, attrs), ...])`` of its shape and the ``reshape`` / ``transpose`` TMs that turn it
        into the parameter's values; the graph applies them, then reshapes to the parameter's shape. See
        :class:`UpdateGraph` for the node names."""
        owner = type(self).__name__
        if params is None:
            unknown = [n for n, s in self._params.items() if s is None]
            if unknown or not self._params:
                raise ConfigError(f"{owner}: build_update_graph needs parameter shapes; "
                                  f"{'unknown for ' + str(unknown) if unknown else 'no parameters set'}")
            params = {n: s for n, s in self._params.items() if s is not None}
        specs: Dict[str, Tuple[Shape, torch.dtype]] = {}
        for pname, spec in params.items():
            try:
                shape, dtype = spec
                shape = tuple(int(d) for d in shape)
            except (TypeError, ValueError):
                raise ConfigError(f"{owner}: parameter '{pname}' must map to (shape, dtype), got {spec!r}") from None
            if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
                raise ConfigError(f"{owner}: parameter '{pname}' must have a floating dtype, got {dtype!r}")
            if pname in self._hyper_keys():
                raise ConfigError(f"{owner}: parameter name '{pname}' clashes with a hyper-parameter node")
            specs[pname] = (shape, dtype)
        if not specs:
            raise ConfigError(f"{owner}: build_update_graph needs at least one parameter")

        graph = Graph(name or f"{self.type_name}_update")
        grad_inputs = {}
        grads = {}
        layouts = {p: _grad_layout(owner, p, v) for p, v in (grad_layouts or {}).items() if p in specs}
        # A parameter the device holds compact (a conv weight, host_io.compact_shape) is updated in that
        # shape: elementwise, the update is the same, and its state then takes no tile per kernel.
        held = {p: compact_shape(shape) or shape for p, (shape, _) in specs.items()}
        layouts.update({p: (held[p], ()) for p, (shape, _) in specs.items() if held[p] != shape and p not in layouts})
        for pname, (shape, dtype) in specs.items():
            layout = layouts.get(pname, (shape, ()))[0]
            if math.prod(layout) != math.prod(shape):
                raise ConfigError(f"{owner}: gradient layout {list(layout)} of '{pname}' does not hold its "
                                  f"{list(shape)} values")
            grad_inputs[pname] = grads[pname] = graph.add_input(GRAD_PREFIX + pname, layout, dtype).name
        for pname, (shape, dtype) in specs.items():
            for k, (op_type, attrs) in enumerate(layouts.get(pname, (shape, ()))[1]):
                grads[pname] = graph.add_op(f"{GRAD_PREFIX}{pname}.layout{k}", op_type, [grads[pname]],
                                            dict(attrs)).name
            if tuple(graph[grads[pname]].shape) != held[pname]:
                grads[pname] = graph.add_op(f"{GRAD_PREFIX}{pname}.as_param", "reshape", [grads[pname]],
                                            {"shape": held[pname]}).name
        params = {}
        for pname, (shape, dtype) in specs.items():
            params[pname] = graph.add_parameter(pname, torch.zeros(shape, dtype=dtype), requires_grad=False).name
            if held[pname] != shape:
                params[pname] = graph.add_op(graph.unique_name(f"{pname}.compact"), "reshape", [pname], {"shape": held[pname]}).name
        for key, value in self._hyper_values().items():
            graph.add_parameter(key, torch.zeros_like(value), requires_grad=False)

        builder = _UpdateGraphBuilder(self, graph)
        new_param: Dict[str, str] = {}
        for pname, (shape, dtype) in specs.items():
            ac = OptimizerTraceContext(builder, pname, held[pname], dtype)
            node = self.generate_op_trace(ac, params[pname], grads[pname])
            if tuple(graph[node].shape) != held[pname]:
                raise ConfigError(f"{owner}: update of '{pname}' has shape {graph[node].shape}, expected {held[pname]}")
            if held[pname] != shape:
                node = graph.add_op(graph.unique_name(f"{pname}.as_param"), "reshape", [node], {"shape": shape}).name
            new_param[pname] = node
        missing = [s for s in builder.state_owner if s not in builder.state_next]
        if missing:
            raise ConfigError(f"{owner}: state tensor(s) {missing} have no loopback (next value)")

        param_outputs = {p: graph.add_output(p + OUTPUT_SUFFIX, n).name for p, n in new_param.items()}
        state_outputs = {s: graph.add_output(s + OUTPUT_SUFFIX, builder.state_next[s]).name
                         for s in builder.state_owner}
        return UpdateGraph(graph=graph, optimizer=self, param_names=list(specs), grad_inputs=grad_inputs,
                           param_outputs=param_outputs, state_outputs=state_outputs,
                           state_names=dict(builder.state_owner), hyper_names=list(self._hyper_keys()),
                           grad_layouts={p: v for p, v in layouts.items() if v[0] != specs[p][0] or v[1]},
                           _initial_state=builder.initial_state, state_decays=dict(builder.decays))

    # --- the torch form -----------------------------------------------------------------------------
    def get_pytorch_optimizer(self, parameters: Union[Mapping[str, torch.Tensor], Iterable[torch.Tensor]],
                              lr: Optional[float] = None) -> torch.optim.Optimizer:
        """A ``torch.optim.Optimizer`` over ``parameters`` (a dict name → tensor, or tensors) that follows
        the same trajectory as the update graph; ``lr`` overrides the learning rate."""
        raise NotImplementedError

    def _torch_params(self, parameters: Any, lr: Optional[float]) -> Tuple[List[torch.Tensor], float]:
        if isinstance(parameters, Mapping):
            parameters = list(parameters.values())
        params = list(parameters)
        if not params:
            raise ConfigError(f"{type(self).__name__}: get_pytorch_optimizer needs at least one tensor")
        lr = self.learning_rate if lr is None else _check_lr(type(self).__name__, lr)
        return params, lr

    def torch_parameter_update(self, *, parameter_name: str, parameter: torch.Tensor,
                               gradient: torch.Tensor) -> torch.Tensor:
        """Golden: the parameter's next value after one step of :meth:`get_pytorch_optimizer`'s optimizer.
        The torch optimizer state of each parameter name is kept between calls."""
        if parameter_name not in self._torch_golden:
            p = torch.nn.Parameter(parameter.detach().clone())
            self._torch_golden[parameter_name] = (p, self.get_pytorch_optimizer([p]))
        p, opt = self._torch_golden[parameter_name]
        with torch.no_grad():
            p.copy_(parameter)
        p.grad = gradient.detach().clone().to(p.dtype)
        opt.step()
        return p.detach().clone()


class SGD(Optimizer):
    """Plain stochastic gradient descent: ``p ← p − lr·g``. State: none (``lr`` is a hyper-parameter)."""

    type_name = "sgd"

    def __init__(self, learning_rate: float, parameters: Optional[Iterable[Any]] = None,
                 device_params: bool = False):
        super().__init__(device_params)
        self.learning_rate = _check_lr("SGD", learning_rate)
        self.set_parameters_to_optimize(parameters)

    def generate_op_trace(self, ac, parameter, gradient):
        step = ac.op("multiply", [gradient, ac.hyper("lr")])
        return ac.op("subtract", [parameter, step])

    def get_pytorch_optimizer(self, parameters, lr=None):
        params, lr = self._torch_params(parameters, lr)
        return torch.optim.SGD(params, lr=lr)


def _moments(ac: OptimizerTraceContext, grad: str, beta1: float, beta2: float) -> Tuple[str, str]:
    """Adam's running moments: declares ``mean``/``variance`` and returns their next values."""
    mean = ac.state("mean")
    variance = ac.state("variance")
    m = ac.op("add", [ac.scale(mean, beta1), ac.scale(grad, 1.0 - beta1)])
    v = ac.op("add", [ac.scale(variance, beta2), ac.scale(ac.op("square", [grad]), 1.0 - beta2)])
    ac.loopback(m, mean)
    ac.loopback(v, variance)
    return m, v


def _bias_corrected(ac: OptimizerTraceContext, m: str, v: str, beta1: float, beta2: float) -> Tuple[str, str]:
    """m / (1 − β1^t), v / (1 − β2^t), with β^t kept as state multiplied by β each step (starts at 1)."""
    out = []
    for x, beta, key in ((m, beta1, "beta1_pow"), (v, beta2, "beta2_pow")):
        pow_state = ac.state(key, init=1.0, scalar=True)
        pow_next = ac.scale(pow_state, beta)
        ac.loopback(pow_next, pow_state)
        correction = ac.op("subtract", [ac.constant(1.0), pow_next])
        out.append(ac.op("divide", [x, correction]))
    return out[0], out[1]


def _adam_direction(ac: OptimizerTraceContext, m: str, v: str, eps: float) -> str:
    """m / (sqrt(v) + eps)."""
    denom = ac.op("add", [ac.op("sqrt", [v]), ac.constant(eps)])
    return ac.op("divide", [m, denom])


class Adam(Optimizer):
    """Adam (Kingma & Ba). ``weight_decay`` is L2 (added to the gradient, as torch.optim.Adam) unless
    ``enable_adam_w``, which decouples it (AdamW). With ``bias_correction`` the moments are divided by
    ``1 − β^t``; β^t is state (``beta1_pow``, ``beta2_pow``, starting at 1, multiplied by β every step).
    State: ``mean``, ``variance`` (+ ``beta1_pow``, ``beta2_pow``)."""

    type_name = "adam"

    def __init__(self, learning_rate: float, beta1: float = 0.9, beta2: float = 0.999, epsilon: float = 1e-8,
                 weight_decay: float = 0.0, bias_correction: bool = True,
                 parameters: Optional[Iterable[Any]] = None, device_params: bool = False,
                 enable_adam_w: bool = False):
        super().__init__(device_params)
        owner = type(self).__name__
        self.learning_rate = _check_lr(owner, learning_rate)
        self.beta1 = _beta(owner, "beta1", beta1)
        self.beta2 = _beta(owner, "beta2", beta2)
        self.epsilon = _non_negative(owner, "epsilon", epsilon)
        self.weight_decay = _non_negative(owner, "weight_decay", weight_decay)
        self.bias_correction = _flag(owner, "bias_correction", bias_correction)
        self.enable_adam_w = _flag(owner, "enable_adam_w", enable_adam_w)
        self.set_parameters_to_optimize(parameters)

    def _config(self):
        return {"learning_rate": self.learning_rate, "beta1": self.beta1, "beta2": self.beta2,
                "epsilon": self.epsilon, "weight_decay": self.weight_decay,
                "bias_correction": self.bias_correction, "enable_adam_w": self.enable_adam_w}

    def generate_op_trace(self, ac, parameter, gradient):
        grad = gradient
        if self.weight_decay and not self.enable_adam_w:
            grad = ac.op("add", [grad, ac.scale(parameter, self.weight_decay)])
        m, v = _moments(ac, grad, self.beta1, self.beta2)
        if self.bias_correction:
            m, v = _bias_corrected(ac, m, v, self.beta1, self.beta2)
        update = _adam_direction(ac, m, v, self.epsilon)
        if self.weight_decay and self.enable_adam_w:
            update = ac.op("add", [update, ac.scale(parameter, self.weight_decay)])
        step = ac.op("multiply", [update, ac.hyper("lr")])
        return ac.op("subtract", [parameter, step])

    def get_pytorch_optimizer(self, parameters, lr=None):
        params, lr = self._torch_params(parameters, lr)
        betas = (self.beta1, self.beta2)
        if not self.bias_correction:
            return TorchAdamNoBiasCorrection(params, lr=lr, betas=betas, eps=self.epsilon,
                                             weight_decay=self.weight_decay, decoupled=self.enable_adam_w)
        if self.enable_adam_w:
            return torch.optim.AdamW(params, lr=lr, betas=betas, eps=self.epsilon, weight_decay=self.weight_decay)
        return torch.optim.Adam(params, lr=lr, betas=betas, eps=self.epsilon, weight_decay=self.weight_decay)


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter): ``p ← p − lr·(m̂/(√v̂+ε) + wd·p)``."""

    type_name = "adamw"

    def __init__(self, learning_rate: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999,
                 eps: float = 1e-8, weight_decay: float = 0.01, bias_correction: bool = True,
                 parameters: Optional[Iterable[Any]] = None, device_params: bool = False):
        super().__init__(learning_rate, beta1=beta1, beta2=beta2, epsilon=eps, weight_decay=weight_decay,
                         bias_correction=bias_correction, parameters=parameters, device_params=device_params,
                         enable_adam_w=True)

    def _config(self):
        cfg = super()._config()
        cfg["eps"] = cfg.pop("epsilon")
        cfg.pop("enable_adam_w")
        return cfg


class LAMB(Optimizer):
    """LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning").

    ``m, v`` as Adam (bias-corrected only with ``correction=True``); ``u = m/(√v+ε) + wd·w``;
    ``trust = clip(‖w‖, *clip_value) / ‖u‖`` (1 when either norm is 0); ``w ← w − lr·trust·u``.
    State: ``mean``, ``variance`` (+ ``beta1_pow``, ``beta2_pow`` with ``correction``)."""

    type_name = "lamb"

    def __init__(self, learning_rate: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-6,
                 weight_decay: float = 0.01, correction: bool = False, clip_value: Tuple[float, float] = (0.0, 10.0),
                 parameters: Optional[Iterable[Any]] = None, device_params: bool = False):
        super().__init__(device_params)
        owner = "LAMB"
        self.learning_rate = _check_lr(owner, learning_rate)
        self.beta1 = _beta(owner, "beta1", beta1)
        self.beta2 = _beta(owner, "beta2", beta2)
        self.eps = _non_negative(owner, "eps", eps)
        self.weight_decay = _non_negative(owner, "weight_decay", weight_decay)
        self.correction = _flag(owner, "correction", correction)
        try:
            lo, hi = clip_value
        except (TypeError, ValueError):
            raise ConfigError(f"LAMB: clip_value must be a (min, max) pair, got {clip_value!r}") from None
        lo, hi = _non_negative(owner, "clip_value[0]", lo), _non_negative(owner, "clip_value[1]", hi)
        if lo > hi:
            raise ConfigError(f"LAMB: clip_value min {lo} is larger than max {hi}")
        self.clip_value = (lo, hi)
        self.set_parameters_to_optimize(parameters)

    def _config(self):
        return {"learning_rate": self.learning_rate, "beta1": self.beta1, "beta2": self.beta2, "eps": self.eps,
                "weight_decay": self.weight_decay, "correction": self.correction,
                "clip_value": list(self.clip_value)}

    def generate_op_trace(self, ac, parameter, gradient):
        m, v = _moments(ac, gradient, self.beta1, self.beta2)
        if self.correction:
            m, v = _bias_corrected(ac, m, v, self.beta1, self.beta2)
        update = _adam_direction(ac, m, v, self.eps)
        if self.weight_decay:
            update = ac.op("add", [update, ac.scale(parameter, self.weight_decay)])
        w_norm = ac.op("clip", [ac.norm(parameter)], {"min": self.clip_value[0], "max": self.clip_value[1]})
        u_norm = ac.norm(update)
        both = ac.op("multiply", [ac.positive(w_norm), ac.positive(u_norm)])
        ratio = ac.safe_divide(w_norm, u_norm, both)
        trust = ac.op("where", [both, ratio, ac.constant(1.0)])
        step = ac.op("multiply", [update, ac.op("multiply", [trust, ac.hyper("lr")])])
        return ac.op("subtract", [parameter, step])

    def get_pytorch_optimizer(self, parameters, lr=None):
        params, lr = self._torch_params(parameters, lr)
        return TorchLAMB(params, lr=lr, betas=(self.beta1, self.beta2), eps=self.eps,
                         weight_decay=self.weight_decay, correction=self.correction, clip_value=self.clip_value)


class LARS(Optimizer):
    """LARS (You et al. 2017, "Large Batch Training of Convolutional Networks").

    ``local_lr = lars_coeff·‖w‖ / (‖g‖ + wd·‖w‖ + ε)`` (1 when ‖w‖ or ‖g‖ is 0); ``d = local_lr·(g + wd·w)``;
    momentum as torch SGD: ``buf ← μ·buf + (1−dampening)·d`` (``buf`` starts at 0), ``d ← d + μ·buf`` with
    Nesterov else ``d ← buf``; ``w ← w − lr·d``. State: ``momentum`` (none when momentum is 0)."""

    type_name = "lars"

    def __init__(self, learning_rate: float = 1e-3, momentum: float = 0.9, nesterov: bool = False,
                 dampening: float = 0.0, weight_decay: float = 0.01, lars_coeff: float = 1e-3,
                 parameters: Optional[Iterable[Any]] = None, device_params: bool = False, epsilon: float = 1e-8):
        super().__init__(device_params)
        owner = "LARS"
        self.learning_rate = _check_lr(owner, learning_rate)
        self.momentum = _non_negative(owner, "momentum", momentum)
        self.nesterov = _flag(owner, "nesterov", nesterov)
        self.dampening = _number(owner, "dampening", dampening)
        self.weight_decay = _non_negative(owner, "weight_decay", weight_decay)
        self.lars_coeff = _non_negative(owner, "lars_coeff", lars_coeff)
        self.epsilon = _non_negative(owner, "epsilon", epsilon)
        if self.nesterov and (self.momentum <= 0 or self.dampening != 0):
            raise ConfigError("LARS: nesterov momentum requires momentum > 0 and dampening == 0")
        self.set_parameters_to_optimize(parameters)

    def _config(self):
        return {"learning_rate": self.learning_rate, "momentum": self.momentum, "nesterov": self.nesterov,
                "dampening": self.dampening, "weight_decay": self.weight_decay, "lars_coeff": self.lars_coeff,
                "epsilon": self.epsilon}

    def generate_op_trace(self, ac, parameter, gradient):
        w_norm = ac.norm(parameter)
        g_norm = ac.norm(gradient)
        denom = ac.op("add", [g_norm, ac.scale(w_norm, self.weight_decay)])
        denom = ac.op("add", [denom, ac.constant(self.epsilon)])
        both = ac.op("multiply", [ac.positive(w_norm), ac.positive(g_norm)])
        local = ac.scale(ac.safe_divide(w_norm, denom, both), self.lars_coeff)
        local = ac.op("where", [both, local, ac.constant(1.0)])
        d = gradient
        if self.weight_decay:
            d = ac.op("add", [d, ac.scale(parameter, self.weight_decay)])
        d = ac.op("multiply", [d, local])
        if self.momentum:
            buf = ac.state("momentum")
            buf_next = ac.op("add", [ac.scale(buf, self.momentum), ac.scale(d, 1.0 - self.dampening)])
            ac.loopback(buf_next, buf)
            d = ac.op("add", [d, ac.scale(buf_next, self.momentum)]) if self.nesterov else buf_next
        step = ac.op("multiply", [d, ac.hyper("lr")])
        return ac.op("subtract", [parameter, step])

    def get_pytorch_optimizer(self, parameters, lr=None):
        params, lr = self._torch_params(parameters, lr)
        return TorchLARS(params, lr=lr, momentum=self.momentum, nesterov=self.nesterov, dampening=self.dampening,
                         weight_decay=self.weight_decay, lars_coeff=self.lars_coeff, eps=self.epsilon)


#: ``get_optimizer_type_from_string`` table.
OPTIMIZER_TYPES: Dict[str, Type[Optimizer]] = {"sgd": SGD, "adam": Adam, "adamw": AdamW, "lars": LARS, "lamb": LAMB}


def get_optimizer_type_from_string(type_string: str) -> Type[Optimizer]:
    """The optimizer class for ``"sgd" | "adam" | "adamw" | "lars" | "lamb"`` (case-insensitive)."""
    if not isinstance(type_string, str) or type_string.lower() not in OPTIMIZER_TYPES:
        raise ConfigError(f"unknown optimizer type {type_string!r}; expected one of {sorted(OPTIMIZER_TYPES)}")
    return OPTIMIZER_TYPES[type_string.lower()]


def optimizer_from_config(config: Mapping[str, Any]) -> Optimizer:
    """An optimizer from ``{"type": "sgd", "params": {"learning_rate": 0.1}}`` (VerifyConfig's form)."""
    if not isinstance(config, Mapping) or "type" not in config:
        raise ConfigError(f"optimizer config must be a dict with a 'type', got {config!r}")
    cls = get_optimizer_type_from_string(config["type"])
    params = config.get("params") or {}
    try:
        return cls(**params)
    except TypeError as e:
        raise ConfigError(f"optimizer '{config['type']}': bad parameters {params!r}: {e}") from None
