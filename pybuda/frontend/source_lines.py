"""The model source line of each node ``torch.export`` creates, recorded cheaply.

torch.fx records a full stack trace on every node it traces: a captured, symbolized traceback with
every frame's source line read back. On a large model that is a third of the export's time (BERT-Large:
~1 s of ~3.5 s), and the frontend reads one frame of it: the innermost one in the model's own code
(:func:`pybuda.frontend.fx_program.source_location`, for op tags, fallback reports and unsupported-op
errors). :func:`recording` turns torch's traces off and records that one frame instead, in the same
``File "...", line N, in name`` form, so the readers see no difference.

The recorder wraps ``torch.fx.proxy.TracerBase.create_node`` (every tracer torch.export uses creates
its nodes there) once per process; the wrapper only acts inside :func:`recording` on the same thread,
so other tracing (a user's own ``torch.fx`` work, ``torch.compile``) is left as torch does it. If a
torch version stops calling it, nodes simply carry no trace and locations fall back to the module path.
"""

from __future__ import annotations

import contextlib
import functools
import linecache
import os
import sys
import threading
from typing import Iterator, Optional

import torch
import torch.fx
import torch.fx.config
import torch.fx.proxy

#: Files whose frames are never the model's own code: torch itself and pybuda's frontends (the export
#: call), the same rule ``fx_program.source_location`` applies to torch's own traces.
TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
FRONTEND_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep

_state = threading.local()
_install_lock = threading.Lock()
_installed = False


def _model_frame_trace() -> Optional[str]:
    """The innermost frame of the model's code on the current stack, formatted as one traceback entry;
    None when the stack reaches the frontend's export call first (a node made by torch's own machinery,
    a module written wholly in torch)."""
    frame = sys._getframe(2)
    while frame is not None:
        path = frame.f_code.co_filename
        if path.startswith(FRONTEND_DIR):
            return None
        if not path.startswith(TORCH_DIR) and not path.startswith("<"):
            line = frame.f_lineno
            text = linecache.getline(path, line).strip()
            entry = f'  File "{path}", line {line}, in {frame.f_code.co_name}'
            return f"{entry}\n    {text}" if text else entry
        frame = frame.f_back
    return None


def _install() -> None:
    """Wrap ``TracerBase.create_node`` once: inside :func:`recording`, a node torch left without a stack
    trace gets the model frame's."""
    global _installed
    with _install_lock:
        if _installed:
            return
        original = torch.fx.proxy.TracerBase.create_node

        @functools.wraps(original)
        def create_node(self, *args, **kwargs):
            node = original(self, *args, **kwargs)
            if getattr(_state, "active", False) and not node.stack_trace:
                trace = _model_frame_trace()
                if trace:
                    node.stack_trace = trace
            return node

        torch.fx.proxy.TracerBase.create_node = create_node
        _installed = True


@contextlib.contextmanager
def recording() -> Iterator[None]:
    """Within this block (on this thread), torch.fx records no stack traces of its own and each new node
    gets the model's source line instead (see the module docstring)."""
    _install()
    was_active = getattr(_state, "active", False)
    was_off = torch.fx.config.do_not_emit_stack_traces
    _state.active = True
    torch.fx.config.do_not_emit_stack_traces = True
    try:
        yield
    finally:
        torch.fx.config.do_not_emit_stack_traces = was_off
        _state.active = was_active
