"""A CPUDevice's trainer: its torch modules (and CPU-fallback stages) trained with torch autograd."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

import torch

from pybuda.errors import InputError, ModuleError
from pybuda.runtime.backend_api import fold_microbatch, split_microbatch
from pybuda.runtime.device import InputItem


class HostTrainer:
    """A CPUDevice's modules trained with torch autograd (CPU-fallback stages included).

    A PyBudaModule (model or loss) is traced once for one sample and run per sample with the op registry's
    torch references, its parameters as torch leaves, so torch autograd trains it like a torch module."""

    def __init__(self, device: Any, sample: InputItem, targets: Optional[InputItem], optimizer_owner: Any,
                 stepped: Optional[Set[int]] = None):
        """``optimizer_owner``: the TTDevice whose optimizer a CPU-fallback stage trains with. ``stepped``: ids of
        the parameters another trainer's optimizer already steps, shared by the session's trainers: the CPU pre
        and post stages of one model hold the very same ``nn.Parameter`` where both read it, and stepping it
        from both would apply its update twice."""
        from pybuda.module import PyBudaModule, PyTorchModule
        from pybuda.runtime.stages import CpuFallbackModule

        self.device = device
        self.modules = list(device.modules)
        for m in self.modules:
            if not isinstance(m, (PyTorchModule, CpuFallbackModule, PyBudaModule)):
                raise ModuleError(f"CPUDevice '{device.name}': training module '{m.name}' ({type(m).__name__}) on a "
                                  f"CPUDevice is not supported; use a PyTorchModule or a PyBudaModule")
        self.loss = device.loss_module
        if self.loss is not None and not isinstance(self.loss, (PyTorchModule, PyBudaModule)):
            raise ModuleError(f"CPUDevice '{device.name}': its loss module must be a PyTorchModule (a torch loss) "
                              f"or a PyBudaModule, got {type(self.loss).__name__}")
        if self.loss is not None and targets is None:
            raise InputError(f"CPUDevice '{device.name}' holds loss module '{self.loss.name}': push targets with "
                             f"push_to_target_inputs or pass sample_targets")
        self.torch_params: Dict[str, torch.nn.Parameter] = {}
        self._graphs: Dict[int, Any] = {}  # id(PyBudaModule) -> its graph, traced for one sample
        framework = _framework_names(getattr(device, "_fallback_of", None))
        for m in self.modules + ([self.loss] if self.loss is not None else []):
            for n, p in _module_parameters(m):
                if p.requires_grad:
                    self.torch_params.setdefault(framework.get(p.data_ptr(), n), p)
        self.optimizer = None
        self.scheduler = None
        self.stepped = stepped if stepped is not None else set()
        params = self.unstepped_parameters()
        if getattr(device, "optimizer_f", None) is not None:
            target = self.modules[0].module if isinstance(self.modules[0], PyTorchModule) and \
                len(self.modules) == 1 else params
            self.optimizer = device.optimizer_f(target)
            self.stepped.update(id(p) for p in params)
            if getattr(device, "scheduler_f", None) is not None:
                self.scheduler = device.scheduler_f(self.optimizer)
        elif optimizer_owner is not None and params:
            self.set_optimizer(optimizer_owner)
        self.has_loss = self.loss is not None
        outs, _ = self.forward(sample.tensors, targets.tensors if targets is not None else None, keep=False)
        self.sample_outputs = [o.detach() for o in outs]

    def unstepped_parameters(self) -> List[torch.nn.Parameter]:
        """This trainer's parameters that no other trainer's optimizer steps yet (each once)."""
        return [p for p in dict.fromkeys(self.torch_params.values()) if id(p) not in self.stepped]

    def set_optimizer(self, owner: Any) -> None:
        """Train with ``owner``'s optimizer (a pybuda optimizer): its torch twin over the parameters no other
        trainer steps and the optimizer was given (all, unless it was given some by name), which this trainer
        steps from now on."""
        from pybuda.runtime.training_programs import optimizer_parameter_names

        wanted = optimizer_parameter_names(owner)
        params = self.unstepped_parameters()
        if wanted is not None:
            chosen = {id(p) for n, p in self.torch_params.items() if n in wanted}
            params = [p for p in params if id(p) in chosen]
        if params:
            self.optimizer = owner.get_pytorch_optimizer(params)
            self.stepped.update(id(p) for p in params)

    def forward(self, inputs: Sequence[torch.Tensor], targets: Optional[Sequence[torch.Tensor]],
                keep: bool = True) -> Tuple[List[torch.Tensor], Any]:
        leaves = [t.detach().float().requires_grad_(True) if t.is_floating_point() else t for t in inputs]
        values: List[torch.Tensor] = list(leaves)
        with torch.enable_grad():
            for m in self.modules:
                values = self._run(m, values)
            if self.loss is not None:
                values = list(self._run(self.loss, values + [t.detach().float() if t.is_floating_point() else t
                                                             for t in (targets or ())]))
        return [v.detach() for v in values], ((leaves, values) if keep else None)

    def _run(self, module: Any, values: Sequence[torch.Tensor]) -> List[torch.Tensor]:
        from pybuda.module import PyBudaModule

        if not isinstance(module, PyBudaModule):
            return _run_torch(module, values)
        graph = self._graphs.get(id(module))
        if graph is None:
            from pybuda.compile import module_to_graph

            sample = [v[0:1].detach() if v.dim() else v.detach() for v in values]
            graph = module_to_graph(module, sample, graph_name=module.name).graph
            self._graphs[id(module)] = graph
        params = {name: self.torch_params.get(name, graph.tensors.get(name)) for name in graph.tensors}
        samples = split_microbatch(list(values), [n.shape for n in graph.inputs], f"module '{module.name}'")
        return fold_microbatch([_eval_graph(graph, s, params) for s in samples])

    def backward(self, pending: Any, output_grads: Optional[Sequence[torch.Tensor]]) -> List[Optional[torch.Tensor]]:
        leaves, outs = pending
        pairs = []
        for k, out in enumerate(outs):
            if not out.requires_grad:
                continue
            g = torch.ones_like(out) if output_grads is None else output_grads[k]
            if g is not None:
                pairs.append((out, g.reshape(out.shape).to(out.dtype)))
        if pairs:
            torch.autograd.backward([p[0] for p in pairs], [p[1] for p in pairs])
        return [leaf.grad if isinstance(leaf, torch.Tensor) and leaf.requires_grad else None for leaf in leaves]

    def zero_grad(self) -> None:
        for p in self.torch_params.values():
            p.grad = None

    def step(self) -> None:
        if self.optimizer is not None:
            self.optimizer.step()

    @property
    def grads(self) -> Dict[str, torch.Tensor]:
        return {n: p.grad.detach().clone() for n, p in self.torch_params.items() if p.grad is not None}

    def parameters(self) -> Dict[str, torch.Tensor]:
        return {n: p.detach().clone() for n, p in self.torch_params.items()}

    def parameter_names(self) -> List[str]:
        """The names :meth:`parameters` gives."""
        return list(self.torch_params)

    def set_parameters(self, values: Mapping[str, torch.Tensor]) -> None:
        unknown = sorted(set(values) - set(self.torch_params))
        if unknown:
            raise InputError(f"CPUDevice '{self.device.name}' has no trainable parameter(s) {unknown}")
        with torch.no_grad():
            for k, v in values.items():
                if tuple(v.shape) != tuple(self.torch_params[k].shape):
                    raise InputError(f"CPUDevice '{self.device.name}': parameter '{k}' has shape "
                                     f"{list(self.torch_params[k].shape)}, got {list(v.shape)}")
            for k, v in values.items():
                self.torch_params[k].copy_(v)


def _framework_names(owner: Any) -> Dict[int, str]:
    """Storage address -> name of every parameter of the PyTorch modules on ``owner`` (the device a CPU-fallback
    stage was split from). A fallback stage's graph shares its parameters' storage with the user's module but
    names them after its own attributes (``a_weight``); its trainer reports them by the module's names
    (``a.weight``), as the device part does."""
    from pybuda.module import PyTorchModule

    if owner is None:
        return {}
    return {p.data_ptr(): n for m in owner.modules if isinstance(m, PyTorchModule)
            for n, p in m.module.named_parameters()}


def _module_parameters(module: Any) -> List[Tuple[str, torch.nn.Parameter]]:
    from pybuda.module import PyBudaModule, PyTorchModule

    if isinstance(module, PyTorchModule):
        return list(module.module.named_parameters())
    if isinstance(module, PyBudaModule):
        # Torch leaves holding the parameters' values: torch autograd and optimizers train them.
        return [(p.get_name(), torch.nn.Parameter(p.value().detach().clone().float(), requires_grad=p.requires_grad))
                for p in module.get_parameters()]
    fn = getattr(module, "fn", None)
    if isinstance(fn, torch.nn.Module):
        return [(f"{module.name}.{n}", p) for n, p in fn.named_parameters()]
    return []


def _eval_graph(graph: Any, inputs: Sequence[torch.Tensor], params: Mapping[str, torch.Tensor]) -> List[torch.Tensor]:
    """One sample through ``graph`` with the op registry's torch references, differentiably (the CPU
    reference executor runs without autograd)."""
    from pybuda.ir.graph import INPUT, OP, OUTPUT
    from pybuda.ops import registry

    values: Dict[str, torch.Tensor] = {node.name: v for node, v in zip(graph.inputs, inputs)}
    outputs = []
    for node in graph:
        if node.kind == INPUT:
            continue
        if node.kind == OP:
            values[node.name] = registry.evaluate(node.op_type, [values[o] for o in node.operands], node.attrs)
        elif node.kind == OUTPUT:
            outputs.append(values[node.operands[0]])
        else:  # parameter or constant
            values[node.name] = params[node.name]
    return outputs


def _run_torch(module: Any, values: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    from pybuda.module import PyTorchModule, flatten_torch_outputs
    from pybuda.tensor import as_tuple

    if isinstance(module, PyTorchModule):
        return list(flatten_torch_outputs(module.module(*values)))
    # A CPU-fallback stage runs once per sample of the microbatch (its shapes are per sample).
    samples = split_microbatch(list(values), module.per_sample_shapes, f"CPU fallback stage '{module.name}'")
    return fold_microbatch([list(as_tuple(module.fn(*s))) for s in samples])
