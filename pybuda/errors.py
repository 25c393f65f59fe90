"""The pybuda exception hierarchy.

Every error a user can cause derives from :class:`PybudaError`, so ``except pybuda.errors.PybudaError``
catches all of them. Each subclass carries enough context to say *where* the mistake is: the compile
stage and op, the list of unsupported framework ops with source locations, the YAML key path of a
netlist problem, or the offending tensor of a push.
"""

from __future__ import annotations

import queue
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence


class PybudaError(Exception):
    """Base class of every error raised by pybuda for a user-facing problem."""


class OpError(PybudaError, ValueError):
    """An op was called with operands or attributes it cannot take (wrong count, shape, type)."""

    def __init__(self, op_type: str, message: str, op_name: Optional[str] = None):
        self.op_type = op_type
        self.op_name = op_name
        where = f"{op_type} '{op_name}'" if op_name else op_type
        super().__init__(f"{where}: {message}")


class ModuleError(PybudaError):
    """A module was built or used incorrectly (duplicate op names, unknown parameter, ...)."""


class CompileError(PybudaError):
    """Compilation failed; names the compile stage and, where known, the op."""

    def __init__(self, message: str, stage: Optional[str] = None, op: Optional[str] = None):
        self.stage = stage
        self.op = op
        prefix = []
        if stage:
            prefix.append(f"stage {stage}")
        if op:
            prefix.append(f"op '{op}'")
        super().__init__(f"[{', '.join(prefix)}] {message}" if prefix else message)


@dataclass(frozen=True)
class UnsupportedOp:
    """One framework op that the compiler cannot place on the device."""

    framework_op: str
    location: str = "<unknown>"
    reason: str = "no mapping to a pybuda op"

    def __str__(self) -> str:
        return f"{self.framework_op} at {self.location}: {self.reason}"


class UnsupportedOpError(CompileError):
    """The model uses ops that cannot be compiled; lists every one with its source location."""

    def __init__(self, ops: Iterable[UnsupportedOp], stage: Optional[str] = "GENERATE_INITIAL_GRAPH"):
        self.ops: Sequence[UnsupportedOp] = list(ops)
        lines = "\n".join(f"  - {op}" for op in self.ops)
        super().__init__(f"{len(self.ops)} unsupported op(s):\n{lines}", stage=stage)


#: Longest quoted value (or key path) an error message carries; netlists are untrusted and a key or
#: scalar can be megabytes long.
QUOTE_LIMIT = 80
_PATH_LIMIT = 300
_MESSAGE_LIMIT = 1000


def shorten(text: str, limit: int = QUOTE_LIMIT) -> str:
    """``text`` cut to a prefix of ``limit`` characters, saying how much was dropped."""
    text = str(text)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...<{len(text) - limit} more characters>"


def quote(value: object, limit: int = QUOTE_LIMIT) -> str:
    """``repr(value)``, cut to a short prefix for error messages (the repr of a huge list is built only
    for lists of at most a few thousand items; longer ones are described by their length)."""
    if isinstance(value, (list, tuple, dict, set)) and len(value) > 1000:
        return f"<{type(value).__name__} of {len(value)} items>"
    return shorten(repr(value), limit)


class NetlistError(PybudaError):
    """A netlist is malformed or breaks a backend rule; names the YAML key path.

    Path and message are cut to bounded prefixes: they quote netlist text, which may be hostile."""

    def __init__(self, path: str, message: str):
        self.path = shorten(path, _PATH_LIMIT)
        super().__init__(f"{self.path}: {shorten(message, _MESSAGE_LIMIT)}")


class InputError(PybudaError, ValueError):
    """Wrong shape, dtype or count of tensors pushed to a device; raised in the caller at push time."""


class ImageError(PybudaError):
    """A device image (.tti) is malformed, tampered with, or tries to escape its folder."""


class RuntimeFailure(PybudaError):
    """An exception inside a device (process or thread) surfaced in the caller.

    When a device failed, ``device_name`` and ``module_name`` say where, ``original_type`` names the
    exception raised there (its ``__cause__`` when it could be rebuilt in the caller) and
    ``traceback_text`` holds the device's traceback; they are None/empty for other runtime failures."""

    device_name: Optional[str] = None
    module_name: Optional[str] = None
    original_type: Optional[str] = None
    traceback_text: str = ""


class NoMoreOutputs(RuntimeFailure, queue.Empty):
    """``output_queue.get()`` found the queue empty, and nothing in the pipeline can fill it: every
    input run so far has been read, the runs asked for have no pushed inputs to run, or the pipeline
    has shut down. It is also a ``queue.Empty``, so ``except queue.Empty`` around ``get(timeout=...)``
    keeps working; it is raised at once instead of after the timeout."""


class ConfigError(PybudaError, ValueError):
    """An unknown or invalid configuration option."""


class GraphFormatError(ModuleError):
    """A saved graph (JSON structure or safetensors values) is malformed or tampered with; names the file
    or field that is wrong."""
