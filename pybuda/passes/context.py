"""The state one compile carries from stage to stage.

A pass is a plain function ``(graph, ctx) -> graph``; ``ctx`` is a :class:`CompileContext`. It holds the
frozen config snapshot, the device descriptor, the microbatch, the name of the stage now running (so
passes can raise ``CompileError(stage=ctx.stage)``) and the few results that later stages and the
runtime need (host-side TMs of inputs and outputs, the consteval trace).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from pybuda.config import CompilerConfig
from pybuda.errors import CompileError

#: A TM the host applies to a tensor: (registry op type, attrs).
HostTM = Tuple[str, Dict[str, Any]]


@dataclass
class CompileContext:
    """What every pass can read (config, device, microbatch) and the cross-stage results."""

    config: CompilerConfig
    device: Any  # pybuda.arch.DeviceDescriptor
    microbatch: int = 1
    microbatch_count: int = 1
    graph_name: str = "graph"
    #: TT-Buda's epoch type of every op of this compile: ``fwd``, ``bwd`` (a training backward graph) or
    #: ``opt`` (an optimizer graph). It names the netlist's graphs (``bwd_0``) and program (``run_bwd_0``).
    epoch_type: str = "fwd"
    stage: str = ""
    #: Registry TMs the host applies to an input before pushing it (hoisted from the graph).
    input_host_tms: Dict[str, List[HostTM]] = field(default_factory=dict)
    #: Registry TMs the host applies to an output after reading it back.
    output_host_tms: Dict[str, List[HostTM]] = field(default_factory=dict)
    #: Parameter/constant values computed at compile time: node name -> {"sources": [...], "ops": [...]}
    consteval_trace: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    #: Free-form notes passes leave for the summary (counts of fused ops, inserted nops ...).
    notes: Dict[str, Any] = field(default_factory=dict)

    @property
    def arch_name(self) -> str:
        """Netlist arch name of the target device (``grayskull``, ``wormhole_b0``, ``blackhole``)."""
        arch = getattr(self.device, "arch", None)
        return getattr(arch, "value", str(arch)).lower() if arch is not None else "grayskull"

    @property
    def is_grayskull(self) -> bool:
        """True when compiling for Grayskull (no Float32/Int32 accumulation, no binary transposes ...)."""
        return self.arch_name == "grayskull"

    @property
    def reproduces_tt_buda(self) -> bool:
        """True under the Ribbon policy, which reproduces TT-Buda's compile for calibration against its
        published figures: the passes that improve on TT-Buda's lowering (stacked im2col taps, folded
        attention scales) keep TT-Buda's form there."""
        from pybuda.balancer.policies import normalize_policy

        return normalize_policy(self.config.balancer_policy) == "Ribbon"

    def error(self, message: str, op: Optional[str] = None) -> CompileError:
        """A CompileError naming the running stage (raise it)."""
        return CompileError(message, stage=self.stage or None, op=op)
