"""The chip's vocabulary: data formats, math fidelity and the tile size.

Everything below the user-facing tensors imports these names from here (the compiler, the netlist, the
golden device and the performance model), so none of them needs :mod:`pybuda.tensor` or torch.
"""

from __future__ import annotations

import enum
from typing import Union

from pybuda.errors import InputError

TILE_DIM = 32


class DataFormat(enum.IntEnum):
    """Tensor storage formats of the Tenstorrent chip (netlist names; see golden/formats.py)."""

    Float32 = 0
    Float16 = 1
    Bfp8 = 2
    Bfp4 = 3
    Bfp2 = 4
    Float16_b = 5
    Bfp8_b = 6
    Bfp4_b = 7
    Bfp2_b = 8
    Lf8 = 10
    Fp8_e4m3 = 11
    UInt16 = 12
    Int8 = 14
    UInt8 = 15
    RawUInt8 = 16
    RawUInt16 = 17
    RawUInt32 = 18
    Int32 = 19
    Invalid = 255

    def to_json(self) -> str:
        return self.name

    @classmethod
    def from_json(cls, value: Union[str, int, "DataFormat"]) -> "DataFormat":
        """Parse a format by netlist name (case-sensitive, as in netlists) or by value."""
        if isinstance(value, DataFormat):
            return value
        if isinstance(value, int):
            return cls(value)
        try:
            return cls[value]
        except KeyError:
            raise InputError(f"unknown data format '{value}'; expected one of {[m.name for m in cls]}") from None

    @property
    def is_bfp(self) -> bool:
        return self in _BFP_FORMATS

    @property
    def is_integer(self) -> bool:
        return self in (DataFormat.Int8, DataFormat.UInt8, DataFormat.Int32, DataFormat.UInt16,
                        DataFormat.RawUInt8, DataFormat.RawUInt16, DataFormat.RawUInt32)

    @property
    def exponent_family(self) -> str:
        """'a' for 5-bit-exponent formats, 'b' for 8-bit, '' for formats outside the A/B families."""
        if self in (DataFormat.Float16, DataFormat.Bfp8, DataFormat.Bfp4, DataFormat.Bfp2, DataFormat.Lf8):
            return "a"
        if self in (DataFormat.Float16_b, DataFormat.Bfp8_b, DataFormat.Bfp4_b, DataFormat.Bfp2_b, DataFormat.Float32):
            return "b"
        return ""


_BFP_FORMATS = frozenset({DataFormat.Bfp8, DataFormat.Bfp4, DataFormat.Bfp2,
                          DataFormat.Bfp8_b, DataFormat.Bfp4_b, DataFormat.Bfp2_b})


class MathFidelity(enum.IntEnum):
    """How many multiplier passes (phases) a multiply uses; see golden/formats.py."""

    LoFi = 0
    HiFi2 = 2
    HiFi3 = 3
    HiFi4 = 4
    HiFi2_B = 10
    Invalid = 255

    def to_json(self) -> str:
        return self.name

    @classmethod
    def from_json(cls, value: Union[str, int, "MathFidelity"]) -> "MathFidelity":
        if isinstance(value, MathFidelity):
            return value
        if isinstance(value, int):
            return cls(value)
        if value == "HiFi2_A":
            return cls.HiFi2
        try:
            return cls[value]
        except KeyError:
            raise InputError(f"unknown math fidelity '{value}'; expected one of {[m.name for m in cls]}") from None

    @property
    def phases(self) -> int:
        """Number of fidelity phases executed (the 1/2/3/4 cost factor)."""
        return {MathFidelity.LoFi: 1, MathFidelity.HiFi2: 2, MathFidelity.HiFi2_B: 2,
                MathFidelity.HiFi3: 3, MathFidelity.HiFi4: 4}.get(self, 4)
