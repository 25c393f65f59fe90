"""Shape arithmetic of netlist TMs on (t, rt, ct) tile shapes (netlist_backend_spec §3.3).

TMs come as the netlist writes them — ``{"broadcast": {"r": 2}}``, ``{"hslice": 4}``, ``"transpose"``,
``{"pad": [rt, ct, value]}`` — or as tuples such as ``("hslice", 4)`` / ``("broadcast", "r", 2)``.
Unknown TMs (``select``, ``gather``, ``tile_broadcast``) leave the tile shape unchanged.
"""

from __future__ import annotations

from typing import Any, Iterable, List, Tuple

Shape3 = Tuple[int, int, int]

# TMs that change nothing the balancer looks at.
_SHAPE_NEUTRAL = {"tile_broadcast", "select", "gather", "buda_unpad", "unpad"}


def parse_tm(tm: Any) -> Tuple[str, Any]:
    """Normalise one TM to ``(name, argument)``; argument is None for ``transpose``."""
    if isinstance(tm, str):
        return tm, None
    if isinstance(tm, dict):
        if len(tm) != 1:
            raise ValueError(f"a TM must be a one-key map, got {tm!r}")
        (name, arg), = tm.items()
        return str(name), arg
    if isinstance(tm, (tuple, list)) and tm:
        name = str(tm[0])
        if len(tm) == 1:
            return name, None
        if name == "broadcast" and len(tm) >= 3:
            return name, {str(tm[1]): tm[2]}
        return name, tm[1] if len(tm) == 2 else list(tm[1:])
    name = getattr(tm, "name", None) or getattr(tm, "type", None)
    if name is not None:
        return str(name), getattr(tm, "attr", None) or getattr(tm, "args", None)
    raise ValueError(f"unrecognised TM {tm!r}")


def apply_tm(shape: Shape3, tm: Any) -> Shape3:
    """The (t, rt, ct) shape after one TM. Raises ValueError when a slice/stack does not divide."""
    t, rt, ct = shape
    name, arg = parse_tm(tm)
    if name == "broadcast":
        items = arg.items() if isinstance(arg, dict) else [tuple(arg)]
        for dim, factor in items:
            factor = int(factor)
            if dim in ("r", 2, -2):
                rt *= factor
            elif dim in ("c", 3, -1):
                ct *= factor
            elif dim in ("z", 1, -3):
                t *= factor
        return t, rt, ct
    if name in ("hslice", "vslice", "hstack", "vstack"):
        f = int(arg)
        if name == "hslice":
            _need(ct % f == 0, name, f, shape)
            return t * f, rt, ct // f
        if name == "vslice":
            _need(rt % f == 0, name, f, shape)
            return t * f, rt // f, ct
        _need(t % f == 0, name, f, shape)
        return (t // f, rt, ct * f) if name == "hstack" else (t // f, rt * f, ct)
    if name == "transpose":
        return t, ct, rt
    if name in ("pad", "buda_pad"):
        if isinstance(arg, dict):
            return t, rt + int(arg.get("rt", 0)), ct + int(arg.get("ct", 0))
        return t, rt + int(arg[0]), ct + int(arg[1])
    return t, rt, ct


def apply_tms(shape: Shape3, tms: Iterable[Any]) -> Shape3:
    """The (t, rt, ct) shape after a TM list, applied left to right."""
    for tm in tms or ():
        shape = apply_tm(shape, tm)
    return shape


def has_reshaping_tms(tms: Iterable[Any]) -> bool:
    """True if the list holds a TM that moves tiles between (t, rt, ct) (anything but tile_broadcast)."""
    return any(parse_tm(tm)[0] not in _SHAPE_NEUTRAL for tm in tms or ())


def tm_names(tms: Iterable[Any]) -> List[str]:
    """The TM names of a list, in order."""
    return [parse_tm(tm)[0] for tm in tms or ()]


def _need(ok: bool, name: str, factor: int, shape: Shape3) -> None:
    if not ok:
        raise ValueError(f"{name} {factor} does not divide shape (t, rt, ct) = {shape}")
