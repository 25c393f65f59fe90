"""``torch.compile`` backend: ``torch.compile(model, backend="pybuda")``.

Dynamo hands each captured FX graph (torch-level ops, weights as inputs) to :func:`pybuda_backend`,
which maps it through the same path as :func:`pybuda.frontend.torch.capture` (``torch.export`` of the
graph, then the ATen mapping) into an ``ir.Graph`` and returns a callable that runs it with the
current executor. Weights that dynamo passes as inputs become graph parameters, refreshed from the
call's arguments every time, so weight updates between calls are seen.

The executor is swappable (:func:`set_executor`, or :func:`make_backend` for a private backend); the
default is the CPU reference :func:`pybuda.verify.run_graph_on_cpu`, until the simulated chip lands.

A graph that cannot be compiled (an op with no mapping, dynamic shapes, non-tensor inputs, an export
failure) runs as the original ``GraphModule``, and the reason is logged; so does a call that needs
autograd (the backend is for inference).

The backend is registered under the name ``"pybuda"`` through the ``torch_dynamo_backends`` entry
point in ``pyproject.toml`` (torch loads it on first use of the name); :func:`register` does the same
by hand for source checkouts that were never pip-installed.
"""

from __future__ import annotations

import itertools
import logging
import re
from typing import Any, Callable, List, Mapping, Optional, Sequence

import torch
import torch.fx

from pybuda.errors import PybudaError

log = logging.getLogger(__name__)

Executor = Callable[..., List[torch.Tensor]]
_executor: Optional[Executor] = None
_graph_ids = itertools.count()


def _default_executor(graph, inputs, parameters=None):
    from pybuda.verify import run_graph_on_cpu

    return run_graph_on_cpu(graph, list(inputs), parameters=parameters)


def set_executor(executor: Optional[Executor]) -> None:
    """Run compiled graphs with ``executor(graph, inputs, parameters) -> outputs`` (None: CPU reference)."""
    global _executor
    _executor = executor


def get_executor() -> Executor:
    """The executor compiled graphs use now."""
    return _executor or _default_executor


_PARAM_NAME = re.compile(r"_(?:parameters|buffers)_")


def _param_name(placeholder: str) -> str:
    """Best-effort state-dict name from dynamo's lifted-parameter placeholder names.

    ``L_self_modules_encoder_modules_layer_modules_0_..._parameters_weight_`` -> ``encoder.layer.0...weight``.
    """
    name = placeholder.strip("_")
    m = list(_PARAM_NAME.finditer(name))
    if not m:
        return placeholder
    last = m[-1]
    prefix, leaf = name[:last.start()], name[last.end():]
    parts = prefix.split("_modules_")[1:]  # the first part is the root variable (L_self, l_s ...)
    return ".".join(parts + [leaf]) if leaf else placeholder


def make_backend(executor: Optional[Executor] = None, config: Any = None) -> Callable:
    """A dynamo backend like :func:`pybuda_backend` with its own executor and compiler config."""
    def backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable:
        return _compile(gm, example_inputs, executor, config)
    return backend


def pybuda_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable:
    """The ``"pybuda"`` dynamo backend: map ``gm`` onto pybuda ops and run it with the executor."""
    return _compile(gm, example_inputs, None, None)


def _fallback(gm: torch.fx.GraphModule, why: str) -> Callable:
    log.warning("pybuda backend: running graph with %d node(s) on torch eager: %s", len(gm.graph.nodes), why)
    return gm.forward


def _compile(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], executor: Optional[Executor],
             config: Any) -> Callable:
    from pybuda.config import CompilerConfig, _get_global_compiler_config
    from pybuda.frontend.torch import capture

    if not all(isinstance(x, torch.Tensor) for x in example_inputs):
        kinds = sorted({type(x).__name__ for x in example_inputs if not isinstance(x, torch.Tensor)})
        return _fallback(gm, f"non-tensor graph inputs ({', '.join(kinds)}), e.g. dynamic shapes")
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    as_params = {}
    for i, (node, value) in enumerate(zip(placeholders, example_inputs)):
        if isinstance(value, torch.nn.Parameter):
            as_params[i] = (_param_name(str(node.target)), value)
    # The device graph takes every non-parameter input; unsupported ops must not silently move to the
    # CPU here, because the graph as a whole already has an exact CPU fallback: the GraphModule.
    base = config if config is not None else _get_global_compiler_config()
    cfg = base.snapshot() if hasattr(base, "snapshot") else CompilerConfig()
    cfg.enable_tvm_cpu_fallback = False
    name = f"dynamo_graph_{next(_graph_ids)}"
    try:
        result = capture(gm, tuple(example_inputs), graph_name=name, config=cfg, input_parameters=as_params)
    except PybudaError as e:
        return _fallback(gm, str(e))
    except Exception as e:  # any other capture failure: stay correct, say why
        return _fallback(gm, f"{type(e).__name__}: {e}")
    log.info("pybuda backend: compiled %s (%d ops)", name, len(result.graph.ops))

    param_positions = sorted(as_params)
    param_names = [as_params[i][0] for i in param_positions]
    input_positions = [i for i in range(len(example_inputs)) if i not in as_params]
    needs_grad = any(getattr(v, "requires_grad", False) for v in example_inputs)

    def run(*args: Any) -> Any:
        if needs_grad and torch.is_grad_enabled() and any(getattr(a, "requires_grad", False) for a in args):
            log.debug("pybuda backend: %s needs autograd; running it on torch eager", name)
            return gm(*args)
        inputs = [args[i] for i in input_positions]
        params: Mapping[str, torch.Tensor] = {n: args[i].detach() for n, i in zip(param_names, param_positions)}
        run_fn = executor or get_executor()
        with torch.no_grad():
            flat = run_fn(result.graph, inputs, params)
        return result.unflatten_outputs(flat)

    run.pybuda_capture = result  # for inspection and tests
    return run


def register() -> None:
    """Register the backend as ``"pybuda"`` with dynamo if the entry point has not (idempotent).

    Not done at import: torch imports this module while loading the entry point and would then see
    the name registered twice.
    """
    from torch._dynamo.backends import registry

    registry._lazy_import()  # loads entry points: with an installed package, the name is now known
    if "pybuda" in registry._COMPILER_FNS:
        return
    if registry._BACKENDS.get("pybuda") is not None:
        registry.lookup_backend("pybuda")  # the entry point registers it
        return
    registry.register_backend(pybuda_backend, name="pybuda")


#: TT-Buda's name for the backend: ``torch.compile(model, backend=pybuda.compile_torch)``.
compile_torch = pybuda_backend
