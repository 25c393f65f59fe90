"""Check a netlist against the backend's rules (netlist_backend_spec §1.2, §1.3, §1.4, §1.5, §2.3, §5.3).

The checker is a list of small named rules, :data:`RULES`, each a generator of
:class:`NetlistRuleError` (a :class:`pybuda.errors.NetlistError` that also carries the rule name; the
message starts with ``[rule_name]``). :func:`validate` raises the first error; :func:`check` returns
them all. Rules are ordered so structural checks (names, fields, inputs) run before the ones that rely
on them; if an earlier rule failed, an exception inside a later rule is treated as a consequence and
dropped. Gating rules (``netlist_sizes``: every size within :mod:`pybuda.netlist.limits`) always run,
and when one fails validation stops there, so no later rule enumerates cores of an absurd grid.

Arch-specific rules use the arch of ``device`` if given, else the netlist's ``devices.arch``. Rules that
need hardware sizes (grid fit, DRAM channel range, L1 fit) run only when a device is given.
"""

from __future__ import annotations

from typing import Iterable, List, Optional

from pybuda.arch.descriptor import DeviceDescriptor
from pybuda.netlist.model import Netlist
from pybuda.netlist.rules.framework import GATES, RULES, Ctx, NetlistRuleError  # noqa: F401  (NetlistRuleError is re-exported)

# Rule modules register their rules on import; the import order is the order rules run in.
from pybuda.netlist.rules import structure as rules_structure  # noqa: E402,F401,I001
from pybuda.netlist.rules import queues as rules_queues  # noqa: E402,F401,I001
from pybuda.netlist.rules import ops as rules_ops  # noqa: E402,F401,I001
from pybuda.netlist.rules import programs as rules_programs  # noqa: E402,F401,I001
from pybuda.netlist.rules.ops import stack_factors  # noqa: F401  (mirrored by the balancer's legalizer)


# ===================================================================================================
# Entry points
# ===================================================================================================


def _context(netlist: Netlist, device: Optional[DeviceDescriptor]) -> Ctx:
    arch = device.arch.value if device is not None else netlist.arch
    return Ctx(netlist=netlist, device=device, arch=arch)


def check(netlist: Netlist, device: Optional[DeviceDescriptor] = None,
          rules: Optional[Iterable[str]] = None) -> List[NetlistRuleError]:
    """Every rule violation of ``netlist`` (optionally only the named ``rules``), in rule order."""
    ctx = _context(netlist, device)
    wanted = set(rules) if rules is not None else None
    errors: List[NetlistRuleError] = []
    for name, fn in RULES:
        if wanted is not None and name not in wanted and name not in GATES:
            continue
        try:
            for path, message in fn(ctx):
                errors.append(NetlistRuleError(name, path, message))
        except Exception:
            # A rule tripping over data an earlier rule already rejected is a consequence, not a bug.
            if not errors:
                raise
        if name in GATES and errors:
            # Later rules assume what a gate checks (bounded sizes); running them could take hours.
            break
    return errors


def validate(netlist: Netlist, device: Optional[DeviceDescriptor] = None) -> None:
    """Raise :class:`NetlistRuleError` (a NetlistError naming the key path and rule) for the first rule
    the netlist breaks; return None if it is valid. Pass ``device`` to also check grid fit, DRAM
    channels and L1 fit against that card."""
    errors = check(netlist, device)
    if errors:
        raise errors[0]


def rule_names() -> List[str]:
    """Names of all validation rules, in the order they run."""
    return [name for name, _ in RULES]
