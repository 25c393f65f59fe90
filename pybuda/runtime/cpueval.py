"""A device's CPU reference (verification): its modules evaluated on the CPU, forward and backward.

PyTorch modules run natively, PyBuda modules on the op registry's torch references, so
``cpueval_forward`` / ``cpueval_backward`` give what a device should compute, and torch autograd gives
the gradients of the inputs and parameters.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import torch

from pybuda.errors import InputError, PybudaError


class DeviceCpuEval:
    """The CPU reference of :class:`~pybuda.runtime.device.Device`'s modules (and its loss module)."""

    def cpueval_forward(self, inputs: Sequence[Any], parameters: Mapping[str, Any], save_for_backward: bool,
                        targets: Sequence[Any] = ()) -> List[torch.Tensor]:
        """Evaluate the forward pass of this device's modules on the CPU for verification: PyTorch modules
        natively, PyBuda modules with the op registry's torch references.

        ``inputs``: one input (one tensor per ordered input). ``parameters``: ``{name: tensor}`` values used in
        place of the modules' own for this evaluation only (unknown names raise InputError). With a loss module
        and ``targets``, the loss is evaluated on the outputs and returned instead. ``save_for_backward`` keeps
        the inputs and outputs (``saved_for_backward``) and records the evaluation for :meth:`cpueval_backward`."""
        from pybuda.tensor import _as_torch

        values = [_as_torch(t).detach() for t in inputs]
        params = {k: _as_torch(v).detach() for k, v in (parameters or {}).items()}
        modules = self._translated_modules if self._translated_modules is not None else self.modules
        if not modules:
            raise PybudaError(f"device '{self.name}' has no modules; place one with place_module")
        everything = list(modules) + ([self.loss_module] if self.loss_module is not None else [])
        known: Dict[str, torch.Tensor] = {}
        for module in everything:
            known.update(_module_parameters(module))
        unknown = sorted(set(params) - set(known))
        if unknown:
            raise InputError(f"device '{self.name}': cpueval_forward got unknown parameter(s) {unknown}; the "
                             f"modules have {sorted(known)}")
        if targets and self.loss_module is None:
            raise InputError(f"device '{self.name}' has no loss module: cpueval_forward got targets")
        if save_for_backward:
            # Leaves autograd differentiates against: the inputs (floating point) and every parameter.
            values = [v.clone().requires_grad_(v.is_floating_point()) for v in values]
            params = {k: params.get(k, v).detach().clone().float().requires_grad_(True) for k, v in known.items()}
        inputs_used = list(values)
        with torch.set_grad_enabled(save_for_backward):
            outputs = list(values)
            for module in modules:
                self._active_module = module.name
                outputs = _eval_module_on_cpu(module, outputs, params)
            if targets:
                self._active_module = self.loss_module.name
                outputs = _eval_module_on_cpu(self.loss_module,
                                              outputs + [_as_torch(t).detach() for t in targets], params)
        self._active_module = None
        if save_for_backward:
            self._cpueval_graph = (inputs_used, params, outputs)
            self.saved_for_backward = ([v.detach() for v in inputs_used], [o.detach() for o in outputs])
        return [o.detach() for o in outputs]

    def cpueval_backward(self, bw_inputs: Sequence[Any], parameters: Mapping[str, Any]
                         ) -> Tuple[List[Optional[torch.Tensor]], Dict[str, torch.Tensor]]:
        """Evaluate the backward pass of the last :meth:`cpueval_forward` (which needs
        ``save_for_backward=True``) for verification, with torch autograd.

        ``bw_inputs``: the gradient of each forward output (for a loss, its gradient: usually 1). Returns the
        gradients of the ordered inputs (None for an input that is not floating point) and ``{name:
        gradient}`` of every parameter (zeros for one the outputs do not depend on). ``parameters`` must name
        the values the forward used, if given: the forward decided them."""
        from pybuda.tensor import _as_torch

        saved = getattr(self, "_cpueval_graph", None)
        if saved is None:
            raise PybudaError(f"device '{self.name}': cpueval_backward needs a cpueval_forward with "
                              f"save_for_backward=True first")
        inputs, params, outputs = saved
        unknown = sorted(set(parameters or {}) - set(params))
        if unknown:
            raise InputError(f"device '{self.name}': cpueval_backward got unknown parameter(s) {unknown}")
        grads_out = [_as_torch(g).detach().to(o.dtype) for g, o in zip(bw_inputs, outputs)]
        if len(grads_out) != len(outputs):
            raise InputError(f"device '{self.name}': cpueval_backward takes one gradient per forward output "
                             f"({len(outputs)}), got {len(list(bw_inputs))}")
        grads_out = [g.expand_as(o) if g.shape != o.shape else g for g, o in zip(grads_out, outputs)]
        leaves = [t for t in inputs if t.requires_grad] + list(params.values())
        found = torch.autograd.grad(outputs, leaves, grads_out, allow_unused=True)
        it = iter(found)
        input_grads = [next(it) if t.requires_grad else None for t in inputs]
        input_grads = [torch.zeros_like(t) if g is None and t.requires_grad else g for t, g in zip(inputs, input_grads)]
        param_grads = {k: (g if g is not None else torch.zeros_like(v)).detach()
                       for (k, v), g in zip(params.items(), it)}
        self._cpueval_graph = None  # the graph is freed: one backward per saved forward, as in torch
        return [g.detach() if g is not None else None for g in input_grads], param_grads


def _module_parameters(module: Any) -> Dict[str, torch.Tensor]:
    from pybuda.module import PyBudaModule, PyTorchModule

    if isinstance(module, PyTorchModule):
        return {n: p.detach() for n, p in module.module.named_parameters()}
    if isinstance(module, PyBudaModule):
        return {p.get_name(): p.value() for p in module.get_parameters() if p.has_value()}
    return {}


def _eval_module_on_cpu(module: Any, values: List[torch.Tensor], params: Mapping[str, torch.Tensor]
                        ) -> List[torch.Tensor]:
    """One module's CPU reference on ``values``, with ``params`` overriding its parameters by name (autograd
    follows when grad mode is on)."""
    from pybuda.module import PyBudaModule, PyTorchModule

    if isinstance(module, PyTorchModule):
        own = dict(module.module.named_parameters())
        out = torch.func.functional_call(module.module, {k: v for k, v in params.items() if k in own},
                                         tuple(values))
        return _flat_outputs(out)
    if isinstance(module, PyBudaModule) or hasattr(module, "to_graph") or hasattr(module, "graph"):
        from pybuda.compile import module_to_graph

        with torch.no_grad():
            captured = module_to_graph(module, [v.detach() for v in values])
        return _eval_graph(captured.graph, values, params)
    return _flat_outputs(module.forward(*values))


def _eval_graph(graph: Any, inputs: Sequence[torch.Tensor], params: Mapping[str, torch.Tensor]
                ) -> List[torch.Tensor]:
    """``graph`` on the op registry's torch references, differentiable (``verify.run_graph_on_cpu`` is not)."""
    from pybuda.ir.graph import CONSTANT, INPUT, OP, OUTPUT, PARAMETER
    from pybuda.ops import registry

    values: Dict[str, torch.Tensor] = dict(zip((n.name for n in graph.inputs), inputs))
    outputs: List[torch.Tensor] = []
    for node in graph:
        if node.kind in (PARAMETER, CONSTANT):
            values[node.name] = params.get(node.name, graph.tensors.get(node.name))
        elif node.kind == OP:
            values[node.name] = registry.evaluate(node.op_type, [values[o] for o in node.operands], node.attrs)
        elif node.kind == OUTPUT:
            outputs.append(values[node.operands[0]])
        elif node.kind != INPUT:
            raise PybudaError(f"graph '{graph.name}': cannot evaluate node '{node.name}' of kind {node.kind}")
    return outputs


def _flat_outputs(out: Any) -> List[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, Mapping):
        return [v for v in out.values() if isinstance(v, torch.Tensor)]
    if isinstance(out, (list, tuple)):
        flat: List[torch.Tensor] = []
        for o in out:
            flat.extend(_flat_outputs(o))
        return flat
    from pybuda.tensor import Tensor

    if isinstance(out, Tensor):
        return [out.value()]
    raise PybudaError(f"a module returned {type(out).__name__}; expected tensors")
