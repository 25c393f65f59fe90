"""What a push is: argument checks for the device-connector calls, and ``push_to_inputs`` arguments turned into
an :class:`InputItem` (tensors detached and contiguous, dict pushes put in ``forward``'s order), each bad
push an :class:`~pybuda.errors.InputError` raised in the caller."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch

from pybuda.errors import InputError


#: TT-Buda's device-connector directions (spec §1.5): the forward ones, and the training ones.
_FORWARD_DIRECTIONS = ("forward", "forward_in", "forward_in_push", "forward_out", "forward_out_pop", "intermediates_pop")
_TRAINING_DIRECTIONS = ("backward", "backward_in", "backward_out", "backward_out_push", "target_in_push")


def _check_direction(device_name: str, direction: str) -> None:
    if direction not in _FORWARD_DIRECTIONS + _TRAINING_DIRECTIONS:
        raise InputError(f"device '{device_name}': unknown transfer direction '{direction}'; expected one of "
                         f"{list(_FORWARD_DIRECTIONS + _TRAINING_DIRECTIONS)}")


def _check_loop_count(device_name: str, what: str, loop_count: Any) -> None:
    if not isinstance(loop_count, int) or isinstance(loop_count, bool) or loop_count < 1:
        raise InputError(f"device '{device_name}': {what}(loop_count=...) must be a positive int, got {loop_count!r}")


def _check_write_index(device_name: str, write_index: Any) -> None:
    if not isinstance(write_index, int) or isinstance(write_index, bool) or write_index < 0:
        raise InputError(f"device '{device_name}': generate needs write_index >= 0 (where the past cache is "
                         f"written), got {write_index!r}")


@dataclass
class Rejected:
    """Response to a request the device refused (bad arguments); raised in the caller, not fatal."""

    error: BaseException


@dataclass
class InputItem:
    """One push: its tensors, and their names when the push was a dict (None for positional)."""

    tensors: Tuple[torch.Tensor, ...]
    names: Optional[Tuple[str, ...]] = None

    @property
    def microbatch(self) -> int:
        """The push's microbatch: dim 0 of its first tensor (1 without tensors or for a 0-d tensor)."""
        return int(self.tensors[0].shape[0]) if self.tensors and self.tensors[0].dim() else 1

    def describe(self) -> str:
        labels = self.names or tuple(str(i) for i in range(len(self.tensors)))
        return ", ".join(f"{n}: {list(t.shape)} {str(t.dtype).replace('torch.', '')}"
                         for n, t in zip(labels, self.tensors))


def _to_torch_input(value: Any, label: str, device_name: str) -> torch.Tensor:
    from pybuda.tensor import Tensor

    if isinstance(value, torch.Tensor):
        t = value
    elif isinstance(value, Tensor):
        if not value.has_value():
            raise InputError(f"device '{device_name}': input {label} is a pybuda Tensor without a value")
        t = value.value()
    elif isinstance(value, np.ndarray):
        t = torch.from_numpy(value)
    else:
        raise InputError(f"device '{device_name}': input {label} must be a torch.Tensor, numpy array or "
                         f"pybuda.Tensor, got {type(value).__name__}")
    if t.is_complex():
        # No pybuda data format holds complex values; converting would silently drop the imaginary part.
        raise InputError(f"device '{device_name}': input {label} is a complex tensor ({t.dtype}); complex tensors "
                         f"are not supported: push the real and imaginary parts as separate real tensors")
    if t.numel() == 0:
        # An empty tensor would become the compile sample and fail deep in the compiler (zero tiles).
        raise InputError(f"device '{device_name}': input {label} is empty (shape {list(t.shape)}); every "
                         f"dimension of a pushed tensor must be at least 1")
    return t.detach().contiguous()


def normalize_push(args: Sequence[Any], device_name: str) -> InputItem:
    """Turn ``push_to_inputs`` arguments (``*tensors`` | one tuple/list | one dict) into an InputItem."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    if len(args) == 1 and isinstance(args[0], Mapping):
        mapping = args[0]
        if not mapping:
            raise InputError(f"device '{device_name}': pushed an empty dict of inputs")
        names = []
        for key in mapping:
            if not isinstance(key, str):
                raise InputError(f"device '{device_name}': dict input keys must be strings, got {key!r}")
            names.append(key)
        return InputItem(tuple(_to_torch_input(mapping[k], repr(k), device_name) for k in names), tuple(names))
    if not args:
        raise InputError(f"device '{device_name}': push_to_inputs needs at least one tensor")
    return InputItem(tuple(_to_torch_input(v, str(i), device_name) for i, v in enumerate(args)))


def _forward_signature(module: Any) -> Optional[inspect.Signature]:
    from pybuda.module import PyBudaModule, PyTorchModule

    try:
        if isinstance(module, PyTorchModule):
            return inspect.signature(module.module.forward)
        if isinstance(module, PyBudaModule):
            return inspect.signature(module.forward)
    except (TypeError, ValueError):  # builtins without a signature
        return None
    return None


def check_against_signature(module: Any, item: InputItem, device_name: str) -> InputItem:
    """Check a first push against ``module.forward``; dict pushes are put in signature order.

    Raises InputError for too many or too few positional inputs, unknown or missing dict keys.
    """
    sig = _forward_signature(module)
    if sig is None:
        return item
    params = list(sig.parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    var_pos = any(p.kind == p.VAR_POSITIONAL for p in params)
    var_kw = any(p.kind == p.VAR_KEYWORD for p in params)
    required = [p.name for p in params if p.default is p.empty
                and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    where = f"device '{device_name}', module '{module.name}'"
    if item.names is None:
        n = len(item.tensors)
        if n > len(positional) and not var_pos:
            raise InputError(f"{where}: forward takes {len(positional)} input(s) "
                             f"({[p.name for p in positional]}), but {n} tensors were pushed")
        missing = [name for name in required if name not in [p.name for p in positional[:n]]]
        if missing:
            raise InputError(f"{where}: forward needs input(s) {missing}, but only {n} tensor(s) were pushed")
        return item
    known = [p.name for p in params if p.kind != p.VAR_POSITIONAL and p.kind != p.VAR_KEYWORD]
    unknown = [k for k in item.names if k not in known]
    if unknown and not var_kw:
        raise InputError(f"{where}: forward has no argument(s) {unknown}; it takes {known}")
    missing = [name for name in required if name not in item.names]
    if missing:
        raise InputError(f"{where}: the pushed dict lacks required input(s) {missing}")
    order = {name: i for i, name in enumerate(known)}
    pairs = sorted(zip(item.names, item.tensors), key=lambda kv: order.get(kv[0], len(order)))
    return InputItem(tuple(t for _, t in pairs), tuple(k for k, _ in pairs))
