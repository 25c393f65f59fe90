"""The converter tables of the frontends: framework op name -> the function that maps it onto registry ops."""

from __future__ import annotations

from typing import Any, Callable, Dict


def registrar(table: Dict[str, Any], what: str) -> Callable[..., Callable[[Any], Any]]:
    """A ``@converts("name", ...)`` decorator filling ``table``; a name registered twice is a ValueError naming
    ``what`` (e.g. "ATen op")."""
    def converts(*names: str) -> Callable[[Any], Any]:
        def deco(fn: Any) -> Any:
            for name in names:
                if name in table:
                    raise ValueError(f"converter for {what} '{name}' registered twice")
                table[name] = fn
            return fn
        return deco
    return converts
