"""The update graph: one optimizer step over a set of parameters as a single :class:`~pybuda.ir.graph.Graph`.

:class:`UpdateGraph` is the step a runtime binds and runs (its node names, initial state, inputs and
outputs); :class:`UpdateGraphBuilder` and :class:`OptimizerTraceContext` are what an optimizer's update rule
(:meth:`pybuda.optimizers.Optimizer.generate_op_trace`) is written against while
:meth:`~pybuda.optimizers.Optimizer.build_update_graph` assembles it; :func:`decay_error` and
:data:`DECAY_TOLERANCE` say whether a data format can carry a decayed state's per-step change. The update
rules themselves (SGD, Adam, LAMB, ...) live in :mod:`pybuda.optimizers`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

import torch

from pybuda.dtypes import DataFormat
from pybuda.errors import ConfigError
from pybuda.ir.graph import Graph

if TYPE_CHECKING:
    from pybuda.optimizers import Optimizer


Shape = Tuple[int, ...]

#: Prefix of the update graph's gradient inputs: ``grad.<parameter name>``.
GRAD_PREFIX = "grad."
#: Suffix of the update graph's output nodes: ``<parameter>.new`` and ``<state>.new``.
OUTPUT_SUFFIX = ".new"


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


class UpdateGraphBuilder:
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


def parse_grad_layout(owner: str, pname: str, value: Any) -> Tuple[Tuple[int, ...], Tuple[Tuple[str, Dict[str, Any]], ...]]:
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

    def __init__(self, builder: UpdateGraphBuilder, parameter: str, shape: Shape, dtype: torch.dtype):
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
