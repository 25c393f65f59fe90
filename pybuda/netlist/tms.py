"""Netlist TMs: the one module for the tensor manipulations on an op's input edge (netlist_backend_spec §3.3).

``input_N_tms: [...]`` lists broadcast, hslice, vslice, hstack, vstack, transpose, tile_broadcast and pad.
Everything about them lives here, and every user (lowering, balancer, placer, netlist rules, golden)
goes through it:

- **objects**: :class:`TM` and its subclasses (frozen, hashable dataclasses), :class:`InputUnpad` /
  :class:`InputPad` (``input_N_unpad`` / ``input_N_pad``) and :class:`TileShape3`;
- **parse / emit**: :func:`as_tms` / :func:`as_tm` read the YAML form (``"transpose"``, ``{"hslice": 2}``,
  ``{"broadcast": {"r": 4}}``, ``{"pad": [rt, ct, value]}``) or pass TM objects through, raising
  :class:`TMError` with the key path inside the list; ``TM.to_obj`` / :func:`to_obj` write it back;
- **shapes** on ``(t, rt, ct)`` tiles: ``TM.apply``, :func:`tm_shape`, :func:`tms_shape`;
- **values** on device tensors ``[..., z, R, C]`` (R, C multiples of 32; any leading dims, so the golden's
  ``[N, t, R, C]`` and lowering's ``[z, R, C]`` share one implementation): :func:`apply_tm`, :func:`apply_tms`.

**Where pad applies.** A ``pad`` TM takes effect after all the other TMs of its list, wherever it is written,
and the input-transform order is: ``input_N_unpad``, the TMs in list order, the pad TMs, ``input_N_pad``
(the BBE golden's order, spec §7.1). :func:`effective_order` gives that order; the shape and value
functions, the balancer's stack check and the netlist rules all follow it.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

import torch

from pybuda.errors import quote

TILE = 32


# ---------------------------------------------------------------------------------------------------
# Shapes and errors
# ---------------------------------------------------------------------------------------------------


class TileShape3(NamedTuple):
    """A tensor shape in tiles as seen by one input (``w`` = input_count is not part of it)."""

    t: int
    rt: int
    ct: int


class TMError(ValueError):
    """A TM cannot be read or applied (unknown name, bad argument, a factor that does not divide, broadcast
    z of t > 1, …). ``path`` is the key path inside the TM list (``[0].broadcast.r``; empty when the
    message is not about one item) and ``reason`` the message without it."""

    def __init__(self, reason: str, path: str = ""):
        super().__init__(f"{path}: {reason}" if path else reason)
        self.reason = reason
        self.path = path


# ---------------------------------------------------------------------------------------------------
# The TM objects
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TM:
    """Base of the tensor manipulations allowed on an op input edge or a queue's producer edge."""

    #: The YAML key (``broadcast``, ``hslice`` …).
    name = ""

    def apply(self, shape: TileShape3) -> TileShape3:
        """The shape after this TM; raises :class:`TMError` if it cannot apply."""
        raise NotImplementedError

    def to_obj(self) -> Any:
        """The YAML value of this TM (a one-key map, or the scalar ``transpose``)."""
        raise NotImplementedError


@dataclass(frozen=True)
class Broadcast(TM):
    """``broadcast: {r|c|z: factor}`` — repeat whole tiles (z needs t == 1)."""

    dim: str
    factor: int
    name = "broadcast"

    def apply(self, shape: TileShape3) -> TileShape3:
        """The shape with ``dim`` multiplied by ``factor`` (z: t becomes ``factor``; needs t == 1)."""
        if self.factor < 1:
            raise TMError(f"broadcast factor must be >= 1, got {self.factor}")
        if self.dim == "r":
            return shape._replace(rt=shape.rt * self.factor)
        if self.dim == "c":
            return shape._replace(ct=shape.ct * self.factor)
        if self.dim == "z":
            if shape.t != 1:
                raise TMError(f"broadcast z needs input t == 1, got t={shape.t}")
            return shape._replace(t=self.factor)
        raise TMError(f"broadcast dim must be r, c or z, got {self.dim!r}")

    def to_obj(self) -> Any:
        """``{"broadcast": {dim: factor}}``."""
        return {"broadcast": {self.dim: self.factor}}


@dataclass(frozen=True)
class _FactorTM(TM):
    factor: int

    def to_obj(self) -> Any:
        """``{name: factor}``."""
        return {self.name: self.factor}

    def _check(self) -> None:
        if self.factor < 1:
            raise TMError(f"{self.name} factor must be >= 1, got {self.factor}")


@dataclass(frozen=True)
class HSlice(_FactorTM):
    """``hslice: f`` — (t, ct) -> (t·f, ct/f); needs ct % f == 0."""

    name = "hslice"

    def apply(self, shape: TileShape3) -> TileShape3:
        """(t·f, rt, ct/f)."""
        self._check()
        if shape.ct % self.factor:
            raise TMError(f"hslice {self.factor} needs ct % {self.factor} == 0, got ct={shape.ct}")
        return TileShape3(shape.t * self.factor, shape.rt, shape.ct // self.factor)


@dataclass(frozen=True)
class VSlice(_FactorTM):
    """``vslice: f`` — (t, rt) -> (t·f, rt/f); needs rt % f == 0."""

    name = "vslice"

    def apply(self, shape: TileShape3) -> TileShape3:
        """(t·f, rt/f, ct)."""
        self._check()
        if shape.rt % self.factor:
            raise TMError(f"vslice {self.factor} needs rt % {self.factor} == 0, got rt={shape.rt}")
        return TileShape3(shape.t * self.factor, shape.rt // self.factor, shape.ct)


@dataclass(frozen=True)
class HStack(_FactorTM):
    """``hstack: f`` — (t, ct) -> (t/f, ct·f); needs t % f == 0."""

    name = "hstack"

    def apply(self, shape: TileShape3) -> TileShape3:
        """(t/f, rt, ct·f)."""
        self._check()
        if shape.t % self.factor:
            raise TMError(f"hstack {self.factor} needs t % {self.factor} == 0, got t={shape.t}")
        return TileShape3(shape.t // self.factor, shape.rt, shape.ct * self.factor)


@dataclass(frozen=True)
class VStack(_FactorTM):
    """``vstack: f`` — (t, rt) -> (t/f, rt·f); needs t % f == 0."""

    name = "vstack"

    def apply(self, shape: TileShape3) -> TileShape3:
        """(t/f, rt·f, ct)."""
        self._check()
        if shape.t % self.factor:
            raise TMError(f"vstack {self.factor} needs t % {self.factor} == 0, got t={shape.t}")
        return TileShape3(shape.t // self.factor, shape.rt * self.factor, shape.ct)


@dataclass(frozen=True)
class Transpose(TM):
    """``transpose`` (a scalar list item) — swap rt and ct; each tile is transposed too."""

    name = "transpose"

    def apply(self, shape: TileShape3) -> TileShape3:
        """(t, ct, rt)."""
        return TileShape3(shape.t, shape.ct, shape.rt)

    def to_obj(self) -> Any:
        """The bare name ``transpose``."""
        return "transpose"


@dataclass(frozen=True)
class TileBroadcast(TM):
    """``tile_broadcast: r|c`` — broadcast row 0 / column 0 within each tile (fused ops only)."""

    dim: str
    name = "tile_broadcast"

    def apply(self, shape: TileShape3) -> TileShape3:
        """The shape, unchanged."""
        if self.dim not in ("r", "c"):
            raise TMError(f"tile_broadcast dim must be r or c, got {self.dim!r}")
        return shape

    def to_obj(self) -> Any:
        """``{"tile_broadcast": dim}``."""
        return {"tile_broadcast": self.dim}


@dataclass(frozen=True)
class Pad(TM):
    """``pad: [rt, ct, value]`` — add ``rt``/``ct`` tiles of ``value`` after the other TMs of the list.
    Not on queues, not in fused ops."""

    rt: int
    ct: int
    value: float = 0.0
    name = "pad"

    def apply(self, shape: TileShape3) -> TileShape3:
        """(t, rt + pad rt, ct + pad ct)."""
        if self.rt < 0 or self.ct < 0:
            raise TMError(f"pad amounts must be >= 0, got [{self.rt}, {self.ct}]")
        return TileShape3(shape.t, shape.rt + self.rt, shape.ct + self.ct)

    def to_obj(self) -> Any:
        """``{"pad": [rt, ct, value]}``."""
        return {"pad": [self.rt, self.ct, self.value]}


#: The TM classes by YAML key. PyBuda's writer could also emit ``select``/``gather``, but the backend
#: parser rejects them ("Unsupported TM op"), so this netlist does too.
TM_TYPES: Dict[str, type] = {cls.name: cls for cls in (Broadcast, HSlice, VSlice, HStack, VStack, Transpose,
                                                         TileBroadcast, Pad)}
_FACTOR_TYPES: Dict[str, type] = {cls.name: cls for cls in (HSlice, VSlice, HStack, VStack)}


@dataclass(frozen=True, kw_only=True)
class InputPad:
    """``input_<N>_pad: {rt, ct, pad_value}`` — pad an input by whole tiles after its TMs."""

    rt: int
    ct: int
    pad_value: float = 0.0


@dataclass(frozen=True, kw_only=True)
class InputUnpad:
    """``input_<N>_unpad: {rt, ct}`` — drop tiles from an input before its TMs."""

    rt: int
    ct: int


# ---------------------------------------------------------------------------------------------------
# Parse (YAML form -> objects) and emit
# ---------------------------------------------------------------------------------------------------


def _kind(v: Any) -> str:
    return {dict: "a map", list: "a list", str: "a string", bool: "a bool", int: "an integer",
            float: "a number", type(None): "nothing"}.get(type(v), type(v).__name__)


def _int(v: Any, path: str, low: int) -> int:
    if not isinstance(v, numbers.Integral) or isinstance(v, bool):
        raise TMError(f"expected an integer, got {_kind(v)} {quote(v)}", path)
    if v < low:
        raise TMError(f"must be >= {low}, got {v}", path)
    return int(v)


def _choice(v: Any, path: str, choices: Sequence[str]) -> str:
    if not isinstance(v, str) or v not in choices:
        raise TMError(f"expected one of {list(choices)}, got {quote(v)}", path)
    return v


def _item(item: Any, path: str, out: List[TM]) -> None:
    """Append the TM(s) of one list item (``broadcast: {r: 2, c: 3}`` gives two Broadcasts)."""
    if isinstance(item, TM):
        out.append(item)
        return
    if isinstance(item, str):
        if item != "transpose":
            raise TMError(f"only transpose may be written as a bare name, got {quote(item)}", path)
        out.append(Transpose())
        return
    if not isinstance(item, dict):
        raise TMError(f"expected a map, got {_kind(item)}", path)
    if not item:
        raise TMError("empty TM", path)
    for name, arg in item.items():
        tpath = f"{path}.{name}" if path else str(name)
        if name == "broadcast":
            if not isinstance(arg, dict):
                raise TMError(f"expected a map, got {_kind(arg)}", tpath)
            if not arg:
                raise TMError("broadcast needs {r|c|z: factor}", tpath)
            for dim, factor in arg.items():
                _choice(dim, f"{tpath}.{dim}", ("r", "c", "z"))
                out.append(Broadcast(dim, _int(factor, f"{tpath}.{dim}", 1)))
        elif name in _FACTOR_TYPES:
            out.append(_FACTOR_TYPES[name](_int(arg, tpath, 1)))
        elif name == "tile_broadcast":
            out.append(TileBroadcast(_choice(arg, tpath, ("r", "c"))))
        elif name == "pad":
            if not isinstance(arg, (list, tuple)):
                raise TMError(f"expected a list, got {_kind(arg)}", tpath)
            if len(arg) != 3:
                raise TMError(f"pad needs [rt, ct, value], got {len(arg)} values", tpath)
            rt, ct, value = _int(arg[0], f"{tpath}[0]", 0), _int(arg[1], f"{tpath}[1]", 0), arg[2]
            if not isinstance(value, numbers.Real) or isinstance(value, bool):
                raise TMError(f"expected a number, got {_kind(value)} {quote(value)}", f"{tpath}[2]")
            out.append(Pad(rt, ct, float(value)))
        elif name == "transpose":
            raise TMError("transpose is written as a bare list item, not a map", tpath)
        else:
            raise TMError("unsupported TM; expected broadcast, hslice, vslice, hstack, vstack, "
                          "transpose, tile_broadcast or pad", tpath)


def as_tms(items: Iterable[Any]) -> Tuple[TM, ...]:
    """A TM list as TM objects: each item is a TM object (kept) or its YAML form; None is the empty list.
    The one reader of the YAML form (the netlist parser builds on it); raises :class:`TMError` naming
    the item's key path."""
    if isinstance(items, tuple) and all(isinstance(tm, TM) for tm in items):
        return items
    if items is None:
        return ()
    if not isinstance(items, (list, tuple)):
        if isinstance(items, (str, dict, TM)) or not isinstance(items, Iterable):
            raise TMError(f"expected a list, got {_kind(items)}")
        items = list(items)
    out: List[TM] = []
    for i, item in enumerate(items):
        _item(item, f"[{i}]", out)
    return tuple(out)


def as_tm(tm: Any) -> TM:
    """One TM object from a TM object or its YAML form (which must hold exactly one TM)."""
    if isinstance(tm, TM):
        return tm
    out: List[TM] = []
    _item(tm, "", out)
    if len(out) != 1:
        raise TMError(f"expected one TM, {tm!r} holds {len(out)}")
    return out[0]


def to_obj(tm: Any) -> Any:
    """The YAML form of one TM (object or YAML form)."""
    return as_tm(tm).to_obj()


def tms_to_obj(tms: Iterable[Any]) -> List[Any]:
    """The YAML form of a TM list (what ``input_N_tms`` and ``BudaOp.input_tms`` hold)."""
    return [tm.to_obj() for tm in as_tms(tms)]


def tm_names(tms: Iterable[Any]) -> List[str]:
    """The YAML names of a TM list, in list order."""
    return [tm.name for tm in as_tms(tms)]


def has_reshaping_tms(tms: Iterable[Any]) -> bool:
    """True if the list holds a TM that moves tiles between (t, rt, ct) (anything but tile_broadcast)."""
    return any(not isinstance(tm, TileBroadcast) for tm in as_tms(tms))


def effective_order(tms: Iterable[Any]) -> Tuple[TM, ...]:
    """The TMs in the order they take effect: list order, with every pad moved after the other TMs."""
    tms = as_tms(tms)
    for tm in tms:
        if isinstance(tm, Pad):
            return tuple(tm for tm in tms if not isinstance(tm, Pad)) + tuple(tm for tm in tms if isinstance(tm, Pad))
    return tms


# ---------------------------------------------------------------------------------------------------
# Shapes on (t, rt, ct) tiles
# ---------------------------------------------------------------------------------------------------


def tm_shape(shape: Sequence[int], tm: Any) -> TileShape3:
    """``(t, rt, ct)`` after one TM; raises :class:`TMError` if it cannot apply."""
    return as_tm(tm).apply(TileShape3(*shape))


def tms_shape(shape: Sequence[int], tms: Iterable[Any] = (), unpad: Optional[InputUnpad] = None,
              pad: Optional[InputPad] = None) -> TileShape3:
    """``(t, rt, ct)`` an input has after ``unpad``, its TMs (pads after the others), then ``pad``
    (the golden's order, spec §7.1); raises :class:`TMError` if a step cannot apply."""
    shape = TileShape3(*shape)
    if unpad is not None:
        if unpad.rt < 0 or unpad.ct < 0 or unpad.rt >= shape.rt or unpad.ct >= shape.ct:
            raise TMError(f"unpad [{unpad.rt}, {unpad.ct}] does not fit shape rt={shape.rt}, ct={shape.ct}")
        shape = TileShape3(shape.t, shape.rt - unpad.rt, shape.ct - unpad.ct)
    for tm in effective_order(tms):
        shape = tm.apply(shape)
    if pad is not None:
        shape = Pad(rt=pad.rt, ct=pad.ct, value=pad.pad_value).apply(shape)
    return shape


# ---------------------------------------------------------------------------------------------------
# Values on device tensors [..., z, R, C]
# ---------------------------------------------------------------------------------------------------


def _pad(x: torch.Tensor, rt: int, ct: int, value: float) -> torch.Tensor:
    return torch.nn.functional.pad(x, (0, ct * TILE, 0, rt * TILE), value=float(value))


# One function per TM type, called as f(x, tm, lead, z, r, c) with ``x`` of shape lead + (z, r, c).

def _broadcast(x: torch.Tensor, tm: Broadcast, lead: tuple, z: int, r: int, c: int) -> torch.Tensor:
    f = tm.factor
    if tm.dim == "z":
        return x.expand(*lead, f, r, c)  # stride 0: see apply_tm
    dim = -2 if tm.dim == "r" else -1
    if x.stride(dim) == 0:  # rows (columns) all alike, e.g. a tile-broadcast bias: stays a stride-0 view
        return x.narrow(dim, 0, 1).expand(lead + ((z, r * f, c) if dim == -2 else (z, r, c * f)))
    ones = (1,) * (len(lead) + 1)
    return x.repeat(*ones, f, 1) if tm.dim == "r" else x.repeat(*ones, 1, f)


def _hslice(x: torch.Tensor, tm: HSlice, lead: tuple, z: int, r: int, c: int) -> torch.Tensor:
    f = tm.factor
    return x.reshape(lead + (z, r, f, c // f)).transpose(-3, -2).reshape(lead + (z * f, r, c // f))


def _hstack(x: torch.Tensor, tm: HStack, lead: tuple, z: int, r: int, c: int) -> torch.Tensor:
    f = tm.factor
    return x.reshape(lead + (z // f, f, r, c)).transpose(-3, -2).reshape(lead + (z // f, r, f * c))


def _vslice(x: torch.Tensor, tm: VSlice, lead: tuple, z: int, r: int, c: int) -> torch.Tensor:
    return x.reshape(lead + (z * tm.factor, r // tm.factor, c))


def _vstack(x: torch.Tensor, tm: VStack, lead: tuple, z: int, r: int, c: int) -> torch.Tensor:
    return x.reshape(lead + (z // tm.factor, r * tm.factor, c))


def _transpose(x: torch.Tensor, tm: Transpose, lead: tuple, z: int, r: int, c: int) -> torch.Tensor:
    return x.transpose(-1, -2)


def _tile_broadcast(x: torch.Tensor, tm: TileBroadcast, lead: tuple, z: int, r: int, c: int) -> torch.Tensor:
    dim = -2 if tm.dim == "r" else -1
    if x.shape[dim] == TILE:  # one tile deep: every row (column) is the first one, as a stride-0 view
        return x.narrow(dim, 0, 1).expand(x.shape)
    tiles = x.reshape(lead + (z, r // TILE, TILE, c // TILE, TILE))
    tiles = tiles[..., 0:1, :, :] if tm.dim == "r" else tiles[..., 0:1]
    return tiles.expand(lead + (z, r // TILE, TILE, c // TILE, TILE)).reshape(x.shape)


def _pad_tm(x: torch.Tensor, tm: Pad, lead: tuple, z: int, r: int, c: int) -> torch.Tensor:
    return _pad(x, tm.rt, tm.ct, tm.value)


_VALUE = {Broadcast: _broadcast, HSlice: _hslice, HStack: _hstack, VSlice: _vslice, VStack: _vstack,
          Transpose: _transpose, TileBroadcast: _tile_broadcast, Pad: _pad_tm}


def _apply(x: torch.Tensor, tm: TM) -> torch.Tensor:
    shape = x.shape
    if len(shape) < 3:
        raise TMError(f"TMs apply to [..., z, R, C] tensors, got shape {list(shape)}")
    *lead, z, r, c = shape
    if r % TILE or c % TILE:
        raise TMError(f"TMs move whole {TILE}x{TILE} tiles, got R x C = {r} x {c}")
    tm.apply(TileShape3(z, r // TILE, c // TILE))  # the shape rules (divisibility, broadcast z) in one place
    fn = _VALUE.get(type(tm))
    if fn is None:
        raise TMError(f"no value semantics for TM {tm!r}")
    return fn(x, tm, tuple(lead), z, r, c)


def apply_tm(x: torch.Tensor, tm: Any) -> torch.Tensor:
    """One TM (object or YAML form) on a device tensor ``[..., z, R, C]``; raises :class:`TMError` where
    :func:`tm_shape` does. A z broadcast returns a stride-0 view (``expand``): the golden's GEMM and
    fidelity masks rely on it to run a shared operand once. A tile broadcast of a one-tile-deep operand,
    and an r/c broadcast of rows/columns that are already alike, are stride-0 views too, so that a
    broadcast bias or layer-norm weight is never materialised."""
    return _apply(x, as_tm(tm))


def apply_tms(x: torch.Tensor, tms: Iterable[Any] = (), unpad: Optional[InputUnpad] = None,
              pad: Optional[InputPad] = None) -> torch.Tensor:
    """The input transforms on a device tensor ``[..., z, R, C]``: drop the ``unpad`` tiles, apply the TMs
    (pads after the others), then ``pad`` — the golden's order (spec §7.1), the values :func:`tms_shape`
    gives the shape of."""
    if unpad is not None:
        x = x[..., : x.shape[-2] - unpad.rt * TILE, : x.shape[-1] - unpad.ct * TILE]
    for tm in effective_order(tms):
        x = _apply(x, tm)
    if pad is not None:
        x = _pad(x, pad.rt, pad.ct, pad.pad_value)
    return x


def apply_tile_tms(x: torch.Tensor, tms: Iterable[Any] = (), unpad: Optional[InputUnpad] = None,
                   pad_value: int = -1) -> torch.Tensor:
    """The input transforms on a tensor with one entry per tile, ``[z, rt, ct]``: where each tile of
    the operand comes from (the performance model tracks which producer t-slice feeds which consumer
    slice with it). A tile broadcast stays inside its tile; padded tiles hold ``pad_value``."""
    if unpad is not None:
        x = x[..., : x.shape[-2] - unpad.rt, : x.shape[-1] - unpad.ct]
    for tm in effective_order(tms):
        z, r, c = x.shape[-3:]
        tm.apply(TileShape3(z, r, c))  # the shape rules, as for values
        if isinstance(tm, TileBroadcast):
            continue
        if isinstance(tm, Pad):
            x = torch.nn.functional.pad(x, (0, tm.ct, 0, tm.rt), value=pad_value)
            continue
        x = _VALUE[type(tm)](x, tm, tuple(x.shape[:-3]), z, r, c)
    return x


__all__ = [
    "TILE", "TileShape3", "TMError", "TM", "Broadcast", "HSlice", "VSlice", "HStack", "VStack", "Transpose",
    "TileBroadcast", "Pad", "TM_TYPES", "InputPad", "InputUnpad", "as_tm", "as_tms", "to_obj",
    "tms_to_obj", "tm_names", "has_reshaping_tms", "effective_order", "tm_shape", "tms_shape", "apply_tm",
    "apply_tms", "apply_tile_tms",
]
