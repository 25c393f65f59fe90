"""Global runtime state (TT-Buda's ``pybudaglobal``): the devices, the pipeline order, and a counter
of changes that decides whether a new run may resume the current pipeline without recompiling.

Devices register themselves when created, so creation order is pipeline order unless
``set_device_pipeline`` says otherwise.
"""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING, List, Optional, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from pybuda.runtime.device import Device

_lock = threading.RLock()
_devices: List["Device"] = []
_pipeline_override: Optional[List["Device"]] = None
_serial = 0


def mark_changed() -> None:
    """Record a change (device created, module placed or removed, pipeline reordered): the next run
    recompiles instead of resuming."""
    global _serial
    with _lock:
        _serial += 1


def state_serial() -> int:
    """A number that changes whenever :func:`mark_changed` is called."""
    return _serial


_local = threading.local()


@contextlib.contextmanager
def unregistered():
    """Devices created inside this block (in this thread) are not added to the user's device list
    (automatic CPU-fallback devices)."""
    previous = getattr(_local, "suppress", False)
    _local.suppress = True
    try:
        yield
    finally:
        _local.suppress = previous


def register_device(device: "Device") -> None:
    """Add ``device`` to the user's devices (the end of the pipeline). A second device of the same name is a
    ModuleError: it would be chained after the first, which usually means a script created its devices again
    after ``shutdown`` (which keeps them) and meant to replace them, and the old device would then feed the new
    one its outputs."""
    if getattr(_local, "suppress", False):
        return
    from pybuda.errors import ModuleError

    with _lock:
        if any(d.name == device.name for d in _devices):
            raise ModuleError(f"a device named '{device.name}' already exists (devices: "
                              f"{', '.join(d.name for d in _devices)}); call pybuda.pybuda_reset() to start again "
                              f"with new devices, or give this one another name")
        _devices.append(device)
        if _pipeline_override is not None:
            _pipeline_override.append(device)
    mark_changed()


def user_devices() -> List["Device"]:
    """The user's devices in pipeline order (automatic CPU-fallback devices are not listed)."""
    with _lock:
        return list(_pipeline_override if _pipeline_override is not None else _devices)


def set_device_pipeline(devices: Sequence["Device"]) -> None:
    """Run devices in this order instead of creation order."""
    from pybuda.errors import PybudaError
    from pybuda.runtime.device import Device

    devices = list(devices)
    for d in devices:
        if not isinstance(d, Device):
            raise PybudaError(f"set_device_pipeline expects Device objects, got {type(d).__name__}")
    if len({id(d) for d in devices}) != len(devices):
        raise PybudaError("set_device_pipeline: a device is listed twice")
    global _pipeline_override
    with _lock:
        for d in devices:
            if d not in _devices:
                _devices.append(d)
        _pipeline_override = devices
    mark_changed()


def clear_devices() -> None:
    """Forget every device (``pybuda_reset``)."""
    global _pipeline_override
    with _lock:
        _devices.clear()
        _pipeline_override = None
    mark_changed()
