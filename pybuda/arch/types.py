"""Backend enums shared by the compiler and the runtime."""

from __future__ import annotations

import enum


class BackendDevice(enum.Enum):
    """Chip architectures."""

    Grayskull = "grayskull"
    Wormhole_B0 = "wormhole_b0"
    Blackhole = "blackhole"

    @classmethod
    def from_string(cls, name: str) -> "BackendDevice":
        """The member for an arch name (case-insensitive; ``wormhole`` means Wormhole_B0)."""
        key = name.lower()
        if key == "wormhole":
            key = "wormhole_b0"
        for member in cls:
            if member.value == key:
                return member
        from pybuda.errors import ConfigError

        raise ConfigError(f"unknown arch '{name}'; expected one of {[m.value for m in cls]}")

    def to_string(self) -> str:
        """The netlist spelling of the arch."""
        return self.value


class BackendType(enum.Enum):
    """Where a TTDevice runs: Silicon (a real card) or Golden (the simulated chip)."""

    NoBackend = "nobackend"
    Golden = "golden"
    Model = "model"
    Versim = "versim"
    Emulation = "emulation"
    Silicon = "silicon"
