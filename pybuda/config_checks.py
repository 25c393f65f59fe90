"""Checks of the values given to the config and the override APIs: each returns the value in the form the
config keeps (an enum for its name, a list for a tuple …) or raises ConfigError naming the option and what it
accepts. :mod:`pybuda.config` checks CompilerConfig fields with them; :mod:`pybuda.config_overrides` the
override APIs' arguments.
"""

from __future__ import annotations

import enum
import numbers
import os
from typing import Any, List, Sequence, Union, get_args, get_origin

from pybuda.config_types import CompileDepth
from pybuda.dtypes import MathFidelity
from pybuda.errors import ConfigError


def _coerce(name: str, tp: Any, value: Any) -> Any:
    origin, args = get_origin(tp), get_args(tp)
    if origin is Union:
        if value is None and type(None) in args:
            return None
        others = [a for a in args if a is not type(None)]
        return _coerce(name, others[0], value) if len(others) == 1 else value
    if tp is bool:
        # Only real bools: "no", "false" and 0 would otherwise count as true (or pass unnoticed).
        if isinstance(value, bool):
            return value
        _bad(name, value, "True or False")
    if tp is int:
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return int(value)
        _bad(name, value, "an int")
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, os.PathLike) and name.endswith(("_dir", "_path")):
            return os.fspath(value)
        _bad(name, value, "a string")
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return config_enum(name, tp, value)
    if origin is list:
        if isinstance(value, list):
            return value
        if isinstance(value, tuple):
            return list(value)
        _bad(name, value, "a list")
    if origin is dict:
        if isinstance(value, dict):
            return value
        _bad(name, value, "a dict")
    return value


def config_enum(name: str, enum_type: Any, value: Any) -> Any:
    """``value`` as a member of ``enum_type`` (the member itself or its name) for config option ``name``;
    ConfigError listing the names otherwise. Plain ints are refused: ``default_df_override=5`` says
    nothing readable about which format was meant."""
    if isinstance(value, enum_type):
        return value
    if isinstance(value, str):
        if enum_type is MathFidelity and value == "HiFi2_A":  # TT-Buda's alias
            return MathFidelity.HiFi2
        if value in enum_type.__members__:
            return enum_type[value]
        if enum_type is CompileDepth and value.upper() in enum_type.__members__:
            return enum_type[value.upper()]
    _bad(name, value, f"a {enum_type.__name__} or one of {list(enum_type.__members__)}")


def _bad(name: str, value: Any, accepted: str) -> None:
    raise ConfigError(f"config option '{name}' must be {accepted}, got {value!r} ({type(value).__name__})")


def _harvested_rows(rows: Sequence[Union[int, Sequence[int]]]) -> List[int]:
    # TT-Buda takes a list of rows (one list per chip in multichip setups; the first is used).
    if rows and isinstance(rows[0], (list, tuple)):
        rows = rows[0]
    for r in rows:
        if not isinstance(r, int) or r < 0:
            raise ConfigError(f"harvested_rows must be non-negative ints, got {r!r}")
    return list(rows)


def _names(op_names: Union[str, Sequence[str]]) -> List[str]:
    return [op_names] if isinstance(op_names, str) else list(op_names)


def _is_predicate(value: Any) -> bool:
    from pybuda.query import NodePredicateBuilder

    return isinstance(value, NodePredicateBuilder)


def _break_entry(where: str, op_names: Any) -> Any:
    """A break list entry: a name or predicate as given, a list as a list (break at its first op)."""
    if isinstance(op_names, str) or _is_predicate(op_names):
        return op_names
    if isinstance(op_names, (list, tuple)) and op_names and all(isinstance(n, str) or _is_predicate(n)
                                                                for n in op_names):
        return list(op_names)
    raise ConfigError(f"{where}: expected an op name, a pybuda.query predicate or a non-empty list of them, "
                      f"got {op_names!r}")
