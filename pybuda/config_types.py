"""The config's vocabulary: the option enums, the names some options take, and the per-op override records
(balancer, placer, mixed precision, buffering nops) that :class:`pybuda.config.CompilerConfig` holds.

Everything here is re-exported by :mod:`pybuda.config`, where callers import it from.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from pybuda.dtypes import DataFormat, MathFidelity
from pybuda.errors import ConfigError


class CompileDepth(enum.IntEnum):
    """Compile stages in order; ``compile_depth`` stops after the named stage."""

    INIT_COMPILE = 0
    GENERATE_INITIAL_GRAPH = 1
    POST_INITIAL_GRAPH_PASS = 2
    CONSTEVAL_GRAPH = 3
    POST_PATTERN_MATCHER = 4
    OPTIMIZED_GRAPH = 5
    AUTOGRAD = 6
    POST_AUTOGRAD_PASS = 7
    PRE_LOWERING_PASS = 8
    BUDA_GRAPH_PRE_PLACER = 9
    BALANCER_PASS = 10
    PRE_NETLIST_PASS = 11
    GENERATE_NETLIST = 12
    BACKEND_GOLDEN_VERIFY = 13
    FULL = 14

    @classmethod
    def from_string(cls, name: str) -> "CompileDepth":
        try:
            return cls[name.upper()]
        except KeyError:
            raise ConfigError(f"unknown compile depth '{name}'; expected one of {[m.name for m in cls]}") from None


class PerfTraceLevel(enum.IntEnum):
    NONE = 0
    LIGHT = 1
    VERBOSE = 2


class DRAMPlacementAlgorithm(enum.IntEnum):
    ROUND_ROBIN = 1
    ROUND_ROBIN_FLIP_FLOP = 2
    GREATEST_CAPACITY = 3
    CLOSEST = 4


class DeviceMode(enum.IntEnum):
    CompileAndRun = 0
    CompileOnly = 1
    RunOnly = 2


BALANCER_POLICIES = ("NLP", "Ribbon", "MaximizeTMinimizeGrid", "MinimizeGrid", "Random", "CNN", "SingleOpPerEpoch")
DEVICE_CONFIGS = ("gs_e75", "gs_e150", "wh_n150", "wh_n300", "bh_p150", "galaxy")


@dataclass
class OpOverride:
    """Balancer overrides for one op (TT-Buda's ``balancer.OpOverride``)."""

    grid_shape: Optional[Tuple[int, int]] = None
    force_dram_parameters: Optional[bool] = None
    t_stream_dir: Optional[str] = None
    t_stream_shape: Optional[Tuple[int, int]] = None
    u_kt: Optional[int] = None
    input_buffer_multiplier: Dict[int, int] = field(default_factory=dict)
    output_buffer_multiplier: Optional[int] = None


@dataclass
class PlacerOverride:
    """Placer overrides for one op."""

    start: Optional[Tuple[int, int]] = None
    transpose_op: bool = False
    chip_id: Optional[int] = None
    spatial_epoch_break: bool = False
    temporal_epoch_break: bool = False


@dataclass
class AMPNodeProperties:
    """One ``configure_mixed_precision`` rule: which ops it matches and what it sets."""

    op_type: Optional[str] = None
    epoch_type: Optional[str] = None
    output_df: Optional[DataFormat] = None
    intermediate_df: Optional[DataFormat] = None
    accumulate_df: Optional[DataFormat] = None
    math_fidelity: Optional[MathFidelity] = None
    name_regex: Optional[str] = None
    input_df: Optional[Dict[int, Tuple[DataFormat, bool]]] = None
    is_gradient_op: Optional[bool] = None
    input_parameter_indices_to_optimize: Optional[List[Tuple[int, int]]] = None
    # An input_df index that fits no op the rule matches is a ConfigError at compile time; pybuda's own
    # presets (enable_amp_light, whose index 2 is a matmul bias that many graphs lack) opt out.
    strict_input_df: bool = field(default=True, repr=False, compare=False)

    def matches(self, op_name: str, op_type: str, epoch_type: str = "fwd") -> bool:
        if self.op_type is not None and self.op_type != op_type:
            return False
        if self.epoch_type is not None and self.epoch_type != epoch_type:
            return False
        # TT-Buda matched with std::regex_match: the pattern must match the whole name.
        if self.name_regex is not None and not re.fullmatch(self.name_regex, op_name):
            return False
        return True


@dataclass
class NopInsertion:
    """One ``insert_nop`` request (TT-Buda's ``NopInsertionInstruction``): ``nop_count`` buffering nops on
    the edges ``src_op`` → each of ``dest_ops``; one chain shared by all destinations (forking to them), or
    with ``daisy_chain`` a chain that passes each destination in turn. ``hoist_tms``: the edge's TMs move to
    the ``src_op`` → nop edge (True) or stay on the nop → destination edge (False)."""

    src_op: Any
    dest_ops: List[Any]
    hoist_tms: bool = True
    nop_count: int = 1
    daisy_chain: bool = False
