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

The graph machinery the rules are written against (:class:`UpdateGraph`, :class:`OptimizerTraceContext`, the
decayed-state checks) is :mod:`pybuda.update_graph`; this module holds the rules, and re-exports those two
classes, which an optimizer written outside pybuda uses.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Type, Union

import torch

from pybuda.errors import ConfigError
from pybuda.ir.graph import Graph
from pybuda.netlist.host_io import compact_shape
from pybuda.torch_optimizers import TorchAdamNoBiasCorrection, TorchLAMB, TorchLARS
from pybuda.update_graph import (GRAD_PREFIX, OUTPUT_SUFFIX, OptimizerTraceContext, Shape, UpdateGraph,
                                 UpdateGraphBuilder, parse_grad_layout)

ParamSpec = Tuple[Sequence[int], torch.dtype]

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
        layouts = {p: parse_grad_layout(owner, p, v) for p, v in (grad_layouts or {}).items() if p in specs}
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

        builder = UpdateGraphBuilder(self, graph)
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
