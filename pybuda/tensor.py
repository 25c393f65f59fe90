"""Tensors as the user sees them: Tensor, Parameter, TensorShape, DataFormat and MathFidelity.

A :class:`Tensor` wraps an optional torch value plus the metadata the compiler needs (shape, data
format, the op that produced it while tracing). Values flow eagerly along a trace, as in TT-Buda, so a
traced PyBuda module also yields the golden result of its forward pass.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from pybuda.errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    from pybuda.op.record import TracedOp

log = logging.getLogger(__name__)

from pybuda.dtypes import TILE_DIM, DataFormat, MathFidelity  # noqa: F401  (re-exported: the public names)


_TORCH_TO_DF = {
    torch.float32: DataFormat.Float32,
    torch.float16: DataFormat.Float16,
    torch.bfloat16: DataFormat.Float16_b,
    torch.int8: DataFormat.Int8,
    torch.uint8: DataFormat.UInt8,
    torch.int32: DataFormat.Int32,
    torch.int64: DataFormat.Int32,
    torch.bool: DataFormat.Int8,
    torch.float64: DataFormat.Float32,
}


def pytorch_dtype_to_buda_dataformat(dtype: torch.dtype, fp32_fallback: DataFormat = DataFormat.Float32) -> DataFormat:
    """Map a torch dtype to the device format TT-Buda would use for it."""
    if dtype in (torch.float32, torch.float64):
        return fp32_fallback
    if dtype == torch.int64:
        log.debug("int64 has no device format; using Int32")
    return _TORCH_TO_DF.get(dtype, DataFormat.Float32)


def buda_dataformat_to_pytorch_dtype(df: DataFormat) -> torch.dtype:
    """The torch dtype that holds values of a device format on the host."""
    if df in (DataFormat.Float16_b, DataFormat.Bfp8_b, DataFormat.Bfp4_b, DataFormat.Bfp2_b):
        return torch.bfloat16
    if df in (DataFormat.Float16, DataFormat.Bfp8, DataFormat.Bfp4, DataFormat.Bfp2, DataFormat.Lf8):
        return torch.float16
    if df in (DataFormat.Int8,):
        return torch.int8
    if df in (DataFormat.Int32, DataFormat.RawUInt32, DataFormat.UInt16, DataFormat.RawUInt16):
        return torch.int32
    if df in (DataFormat.UInt8, DataFormat.RawUInt8):
        return torch.uint8
    return torch.float32


class TensorShape:
    """A shape with TT-Buda's accessors: ``r``/``c`` are the last two dims, ``z``/``w`` the two before."""

    def __init__(self, *dims: int):
        if len(dims) == 1 and isinstance(dims[0], (tuple, list, torch.Size)):
            dims = tuple(dims[0])
        self.dims: Tuple[int, ...] = tuple(int(d) for d in dims)

    def _from_end(self, k: int) -> int:
        return self.dims[-k] if len(self.dims) >= k else 1

    @property
    def r(self) -> int:
        return self._from_end(2)

    @property
    def c(self) -> int:
        return self._from_end(1)

    @property
    def z(self) -> int:
        return self._from_end(3)

    @property
    def w(self) -> int:
        return self._from_end(4)

    @property
    def rt(self) -> int:
        """Rows in tiles (rounded up)."""
        return -(-self.r // TILE_DIM)

    @property
    def ct(self) -> int:
        """Columns in tiles (rounded up)."""
        return -(-self.c // TILE_DIM)

    def get_pytorch_shape(self) -> Tuple[int, ...]:
        return self.dims

    def __len__(self) -> int:
        return len(self.dims)

    def __getitem__(self, i):
        return self.dims[i]

    def __iter__(self):
        return iter(self.dims)

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, TensorShape):
            return self.dims == other.dims
        if isinstance(other, (tuple, list, torch.Size)):
            return self.dims == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.dims)

    def __repr__(self) -> str:
        return f"TensorShape{list(self.dims)}"


def _as_torch(value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value)
    if isinstance(value, Tensor):
        return value.value()
    if isinstance(value, (int, float, bool)):
        return torch.tensor(value)
    raise InputError(f"expected a torch.Tensor, numpy array or pybuda.Tensor, got {type(value).__name__}")


class Tensor:
    """A tensor in a PyBuda program: a shape, a data format and, when known, a torch value.

    Tensors made while tracing remember the op that produced them (``src_op``); tensors created from
    torch are leaves. ``+``, ``-`` and ``*`` record Add/Subtract/Multiply ops.
    """

    def __init__(self, shape: Sequence[int], data_format: DataFormat = DataFormat.Float32,
                 value: Optional[torch.Tensor] = None, src_op: Optional["TracedOp"] = None,
                 requires_grad: bool = False, constant: bool = False, dtype: Optional[torch.dtype] = None):
        self._shape = TensorShape(*shape)
        self._data_format = DataFormat.from_json(data_format)
        self._value = value
        self.src_op = src_op
        self.requires_grad = requires_grad
        self._constant = constant
        self._dtype = dtype if dtype is not None else (value.dtype if value is not None else buda_dataformat_to_pytorch_dtype(self._data_format))

    # --- construction -------------------------------------------------------------------------
    @classmethod
    def create_from_torch(cls, t: torch.Tensor, dev_data_format: Optional[DataFormat] = None,
                          constant: bool = False) -> "Tensor":
        """Wrap a torch tensor (it becomes an activation input, or a constant if ``constant``)."""
        t = _as_torch(t)
        df = dev_data_format if dev_data_format is not None else pytorch_dtype_to_buda_dataformat(t.dtype)
        return cls(tuple(t.shape), df, value=t, requires_grad=t.requires_grad, constant=constant, dtype=t.dtype)

    @classmethod
    def create_from_trace(cls, src_op: "TracedOp", shape: Sequence[int], data_format: DataFormat,
                          dtype: Optional[torch.dtype] = None) -> "Tensor":
        return cls(shape, data_format, src_op=src_op, dtype=dtype)

    # --- accessors ------------------------------------------------------------------------------
    @property
    def shape(self) -> TensorShape:
        return self._shape

    @property
    def data_format(self) -> DataFormat:
        return self._data_format

    @property
    def pt_data_format(self) -> torch.dtype:
        return self._dtype

    @property
    def dtype(self) -> torch.dtype:
        return self._dtype

    @property
    def src_layer(self) -> Optional[str]:
        return self.src_op.layer if self.src_op is not None else None

    def has_value(self) -> bool:
        return self._value is not None

    def value(self) -> torch.Tensor:
        if self._value is None:
            raise InputError(f"tensor {self!r} has no value (it was traced without data)")
        return self._value

    def set_value(self, value: Any) -> None:
        self._value = _as_torch(value)

    def to_pytorch(self) -> torch.Tensor:
        return self.value()

    def to_framework(self, framework: str) -> Any:
        """This tensor's value in ``framework``: ``pytorch``/``torch``, ``numpy``, ``jax`` or ``tensorflow``
        (these two need the ``.[jax]`` / ``.[tf]`` extras)."""
        if framework in ("pytorch", "torch"):
            return self.to_pytorch()
        if framework == "numpy":
            return self.to_pytorch().detach().numpy()
        if framework == "jax":
            from pybuda.frontend.jax import to_jax

            return to_jax(self)
        if framework in ("tensorflow", "tf"):
            from pybuda.frontend.tensorflow import to_tf

            return to_tf(self)
        raise InputError(f"unsupported framework '{framework}'; expected pytorch, numpy, jax or tensorflow")

    def is_constant(self) -> bool:
        return self._constant

    def detach(self) -> "Tensor":
        v = self._value.detach() if self._value is not None else None
        return Tensor(self._shape.dims, self._data_format, value=v, constant=self._constant, dtype=self._dtype)

    def clone(self) -> "Tensor":
        v = self._value.clone() if self._value is not None else None
        return Tensor(self._shape.dims, self._data_format, value=v, src_op=self.src_op,
                      requires_grad=self.requires_grad, constant=self._constant, dtype=self._dtype)

    def to_format(self, df: DataFormat) -> "Tensor":
        out = self.clone()
        out._data_format = DataFormat.from_json(df)
        return out

    # --- arithmetic sugar (records ops while tracing) --------------------------------------------
    def _binary(self, op: str, other: Any, reverse: bool = False) -> "Tensor":
        from pybuda import op as ops

        fn = {"add": ops.Add, "subtract": ops.Subtract, "multiply": ops.Multiply}[op]
        a, b = (other, self) if reverse else (self, other)
        return fn("", a, b)

    def __add__(self, other):
        return self._binary("add", other)

    def __radd__(self, other):
        return self._binary("add", other, reverse=True)

    def __sub__(self, other):
        return self._binary("subtract", other)

    def __rsub__(self, other):
        return self._binary("subtract", other, reverse=True)

    def __mul__(self, other):
        return self._binary("multiply", other)

    def __rmul__(self, other):
        return self._binary("multiply", other, reverse=True)

    def __repr__(self) -> str:
        src = f", src_op={self.src_op.name}" if self.src_op is not None else ""
        return f"Tensor(shape={list(self._shape.dims)}, df={self._data_format.name}{src})"


class Parameter(Tensor):
    """A trainable (or frozen) weight of a module.

    ``Parameter(1, 1, 32, 32)`` makes an uninitialised Float32 parameter of that shape;
    ``Parameter(torch_tensor)`` takes the value (and its format) from torch. A parameter assigned as
    an attribute of a PyBudaModule is named ``<module>.<attr>`` unless ``name`` was given.
    """

    def __init__(self, *args: Any, requires_grad: bool = True, name: Optional[str] = None,
                 dev_data_format: Optional[DataFormat] = None):
        value: Optional[torch.Tensor] = None
        if len(args) == 1 and isinstance(args[0], (torch.Tensor, np.ndarray)):
            value = _as_torch(args[0])
            shape = tuple(value.shape)
            df = dev_data_format if dev_data_format is not None else pytorch_dtype_to_buda_dataformat(value.dtype)
        else:
            if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)):
                args = tuple(args[0])
            if not args or not all(isinstance(d, int) and d > 0 for d in args):
                raise InputError(f"Parameter expects a tensor or positive integer dims, got {args!r}")
            shape = tuple(args)
            df = dev_data_format if dev_data_format is not None else DataFormat.Float32
        super().__init__(shape, df, value=value, requires_grad=requires_grad,
                         dtype=value.dtype if value is not None else torch.float32)
        self._forced_name = name
        self._auto_name: Optional[str] = None

    def get_name(self) -> str:
        """The forced name, else the name given by the owning module, else a placeholder."""
        return self._forced_name or self._auto_name or f"parameter_{id(self):x}"

    def _set_auto_name(self, name: str) -> None:
        self._auto_name = name

    def set_requires_grad(self, requires_grad: bool) -> None:
        self.requires_grad = requires_grad

    def set_value(self, value: Any) -> None:
        """Set the parameter's value; its shape must match (0-d values are unsqueezed)."""
        t = _as_torch(value)
        if t.dim() == 0:
            t = t.unsqueeze(0)
        if tuple(t.shape) != self.shape.dims:
            raise InputError(f"parameter '{self.get_name()}' has shape {list(self.shape.dims)}, "
                             f"cannot set a value of shape {list(t.shape)}")
        self._value = t
        self._dtype = t.dtype

    def value(self, is_buda: bool = False) -> torch.Tensor:  # noqa: D401 - same contract as Tensor.value
        if self._value is None:
            raise InputError(f"parameter '{self.get_name()}' has no value; call set_value() or "
                             f"PyBudaModule.set_parameter() first")
        return self._value

    def get_empty_tensor(self) -> torch.Tensor:
        return torch.zeros(self.shape.dims, dtype=self._dtype)

    def __repr__(self) -> str:
        return f"Parameter(name={self.get_name()}, shape={list(self.shape.dims)}, df={self.data_format.name})"


SomeTensor = Union[torch.Tensor, Tensor, np.ndarray]


def to_pt_tensors(tensors: Sequence[SomeTensor]) -> Tuple[torch.Tensor, ...]:
    """Convert a sequence of pybuda/numpy/torch tensors to torch tensors."""
    return tuple(_as_torch(t) for t in tensors)


def to_buda_tensors(tensors: Sequence[SomeTensor]) -> Tuple[Tensor, ...]:
    """Convert a sequence of torch/numpy tensors to pybuda Tensors (pybuda Tensors pass through)."""
    return tuple(t if isinstance(t, Tensor) else Tensor.create_from_torch(_as_torch(t)) for t in tensors)


def remove_microbatch(tensors: Sequence[Tensor]) -> List[Tensor]:
    """Narrow dim 0 of each tensor to 1 (the compile sample); TT-Buda's microbatch convention."""
    out = []
    for t in tensors:
        v = t.value()[0:1] if t.has_value() else None
        shape = (1,) + tuple(t.shape.dims[1:])
        out.append(Tensor(shape, t.data_format, value=v, dtype=t.dtype))
    return out


def as_tuple(value: Any) -> tuple:
    """A module's result as a tuple of tensors (a single tensor becomes a 1-tuple)."""
    return (value,) if isinstance(value, torch.Tensor) else tuple(value)
