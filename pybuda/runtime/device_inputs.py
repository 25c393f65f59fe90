"""A device's inputs: pushes and training targets, checked in the caller before they are queued.

Pushing inputs
--------------
``push_to_inputs`` takes ``*tensors``, one tuple/list, or one dict (its keys name the first module's
forward arguments). Every push is checked in the caller before it is queued, so a bad push raises
:class:`pybuda.errors.InputError` at once instead of hanging a device later (tt-buda#56):

* the first push is checked against the first module's ``forward`` signature (argument count, dict
  keys) and becomes the **compile sample** (``_first_inputs``), as in TT-Buda;
* every later push must match it: same count (same keys for dicts), same shapes, same dtypes.
  Dim 0 is the microbatch size, so it must match too (a TT device is compiled for that microbatch).

Pushes go to ``cpu_fallback_device_pre`` when the frontend moved the start of the model to a CPU
device. Values are detached, made contiguous and stored as torch tensors.
"""

from __future__ import annotations

import queue
from typing import Any, List, Mapping, Optional, Tuple

import numpy as np
import torch

from pybuda.errors import InputError
from pybuda.runtime.push import InputItem, check_against_signature, normalize_push
from pybuda.runtime.transport import put_item


class DeviceInputs:
    """The input side of :class:`~pybuda.runtime.device.Device`: its compile sample, its input queue
    (``_input_queue``, ``_staging``) and the targets of its loss module (``_targets``), all set up by
    ``Device.__init__``."""

    def push_to_inputs(self, *tensors: Any) -> None:
        """Push one input (``*tensors``, a tuple, or a dict of named tensors) onto this device.

        Validated at once against the first push (the compile sample): a wrong count, key, shape or
        dtype raises InputError here. If the pipeline has failed, raises RuntimeFailure.
        """
        if self.cpu_fallback_device_pre is not None:
            return self.cpu_fallback_device_pre.push_to_inputs(*tensors)
        from pybuda.runtime import context

        ctx = context.current()
        if ctx is not None:
            ctx.check_health()
            if self in ctx.devices and ctx.devices[0] is not self:
                raise InputError(f"device '{self.name}' is not the first device of the running pipeline; push "
                                 f"inputs to '{ctx.devices[0].name}'")
        item = self.validate_push(normalize_push(tensors, self.name))
        if self._first_inputs is None:
            self._first_inputs = item
        put_item(self._input_queue, item)
        if ctx is not None and ctx.devices and ctx.devices[0] is self:
            ctx.note_push()  # the pipeline counts the outputs it owes (OutputQueue.get never hangs)

    def validate_push(self, item: InputItem) -> InputItem:
        """Check ``item`` against the first push (or, for the first push, the module signature).

        Returns the item as it will be queued (dict inputs in the first push's order)."""
        first = self._first_inputs
        if first is None:
            if self.modules:
                item = check_against_signature(self.modules[0], item, self.name)
            self._check_first_push(item)
            return item
        expected = first.describe()
        if first.names is not None and item.names is not None:
            if set(item.names) != set(first.names) or len(item.names) != len(first.names):
                raise InputError(f"device '{self.name}': pushed keys {list(item.names)}, but the first push "
                                 f"(the compile sample) had {list(first.names)}")
            lookup = dict(zip(item.names, item.tensors))
            item = InputItem(tuple(lookup[k] for k in first.names), first.names)
        elif first.names is None and item.names is not None:
            raise InputError(f"device '{self.name}': pushed a dict {list(item.names)}, but the first push was "
                             f"positional ({expected}); push tensors in the same form")
        if len(item.tensors) != len(first.tensors):
            raise InputError(f"device '{self.name}': pushed {len(item.tensors)} tensor(s), but every push must "
                             f"have {len(first.tensors)} like the first push ({expected})")
        labels = first.names or tuple(str(i) for i in range(len(first.tensors)))
        for label, got, want in zip(labels, item.tensors, first.tensors):
            if tuple(got.shape) != tuple(want.shape):
                hint = ""
                if got.dim() == want.dim() and got.dim() and tuple(got.shape[1:]) == tuple(want.shape[1:]):
                    hint = (f"; dim 0 is the microbatch size, and this pipeline was compiled for microbatch "
                            f"{want.shape[0]}")
                raise InputError(f"device '{self.name}': input {label} has shape {list(got.shape)}, expected "
                                 f"{list(want.shape)} (from the first push){hint}")
            if got.dtype != want.dtype:
                raise InputError(f"device '{self.name}': input {label} has dtype {got.dtype}, expected "
                                 f"{want.dtype} (from the first push)")
        return InputItem(item.tensors, first.names)

    def _check_first_push(self, item: InputItem) -> None:
        """Extra rules for the compile sample (TTDevice: a common microbatch dim)."""

    def set_sample_inputs(self, sample: Any) -> None:
        """Use ``sample`` (as for push_to_inputs) as the compile sample without queueing it.

        If inputs were already pushed, the sample must match them."""
        if self.cpu_fallback_device_pre is not None:
            return self.cpu_fallback_device_pre.set_sample_inputs(sample)
        args = (sample,) if isinstance(sample, (Mapping, torch.Tensor, np.ndarray)) else tuple(sample)
        item = self.validate_push(normalize_push(args, self.name))
        if self._first_inputs is None:
            self._first_inputs = item

    def reset_inputs(self) -> None:
        """Forget the compile sample and drop queued inputs (the next push becomes the sample).

        CPU-fallback devices from the last initialization are detached: the next pipeline splits the
        model again for the new sample."""
        self._first_inputs = None
        _drain(self._staging)
        _drain(self._targets)
        self._first_targets = None
        self.cpu_fallback_device_pre = None
        self.cpu_fallback_device_post = None
        self._translated_modules = None

    def first_input_item(self) -> Optional[InputItem]:
        """The compile sample: the first push (or the sample given to initialize_pipeline), or None."""
        if self.cpu_fallback_device_pre is not None:
            return self.cpu_fallback_device_pre.first_input_item()
        return self._first_inputs

    def get_first_inputs(self, peek: bool = False) -> Optional[Tuple[int, Tuple[torch.Tensor, ...]]]:
        """TT-Buda's form of the compile sample: ``(microbatch size, first input)``, or None before the first
        push. The first input stays the compile sample either way (``peek`` is accepted for TT-Buda's
        signature: nothing here consumes it)."""
        item = self.first_input_item()
        if item is None:
            return None
        return self.microbatch_size or 1, tuple(item.tensors)

    def get_first_targets(self) -> Optional[Tuple[torch.Tensor, ...]]:
        """The first targets pushed (the compile sample of the loss module), or None."""
        return tuple(self._first_targets.tensors) if self._first_targets is not None else None

    @property
    def microbatch_size(self) -> Optional[int]:
        """Dim 0 of the compile sample (TT-Buda's microbatch), or None before the first push."""
        first = self.first_input_item()
        if first is None or not first.tensors or first.tensors[0].dim() == 0:
            return None
        return int(first.tensors[0].shape[0])

    def push_to_target_inputs(self, *tensors: Any) -> None:
        """Push the targets of one input (``*tensors`` or a tuple) for this device's loss module.

        Validated at once against the first targets pushed: a wrong count, shape or dtype raises InputError
        here, and a device without a loss module refuses targets."""
        if self.loss_module is None:
            raise InputError(f"device '{self.name}' has no loss module: place one with place_loss_module on the last "
                             f"device and push targets there")
        item = normalize_push(tensors, self.name)
        first = self._first_targets
        if first is not None:
            want = [(tuple(t.shape), t.dtype) for t in first.tensors]
            got = [(tuple(t.shape), t.dtype) for t in item.tensors]
            if want != got:
                raise InputError(f"device '{self.name}': targets {item.describe()} do not match the first targets "
                                 f"pushed ({first.describe()}); every push must have the same shapes and dtypes")
        else:
            self._first_targets = item
        self._targets.put(item)


def _drain(q: Any) -> List[Any]:
    items = []
    while True:
        try:
            items.append(q.get_nowait())
        except queue.Empty:
            return items
