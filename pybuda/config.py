"""Compiler configuration: one :class:`CompilerConfig`, the global instance and the override APIs.

``set_configuration_options`` and the ``override_*`` / ``set_*_break`` / ``configure_mixed_precision``
functions edit the global instance, as in TT-Buda; compile snapshots it (``snapshot``) and stores it
with the netlist and the device image.

Environment variables are read here and nowhere else: :func:`read_env` reads every one pybuda honours
into a plain :class:`EnvSettings` record, and the rest of the package asks it. The PYBUDA_* variables that
mirror config fields are defaults: a ``CompilerConfig`` takes them when it is created (so the global
config takes them once, when it is created or reset) for the fields its caller did not pass, and a
compile never applies them again, so an explicit config or a ``set_configuration_options`` call beats
the environment.
"""

from __future__ import annotations

import copy
import enum
import functools
import logging
import numbers
import os
import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union, get_args, get_origin, get_type_hints

from pybuda.errors import ConfigError
from pybuda.dtypes import DataFormat, MathFidelity
import pybuda.query as query  # TT-Buda's config imports it too: ``pybuda.query`` is reachable from here
# The table of options pybuda cannot honour (or TT-Buda ignored) and its checks; re-exported for callers.
from pybuda.option_rules import (  # noqa: F401
    OPTION_RULES, apply_set_rule, check_compile_options, log_once, resolve_device_config, write_backend_db,
)

log = logging.getLogger(__name__)

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


def _remember_given_fields(cls):
    """Wrap a dataclass's generated ``__init__`` so that ``__post_init__`` can tell the fields its caller
    passed (an explicit value, which beats the environment) from those left at their defaults."""
    generated = cls.__init__
    names = [f.name for f in fields(cls) if f.init]

    @functools.wraps(generated)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.__dict__["_given_fields"] = frozenset(names[:len(args)]).union(kwargs)
        generated(self, *args, **kwargs)

    cls.__init__ = __init__
    return cls


@_remember_given_fields
@dataclass
class CompilerConfig:
    """Every compile option, with TT-Buda's defaults.

    PYBUDA_* environment variables that mirror a field (:data:`ENV_CONFIG_FIELDS`) set it when the config
    is created, unless the field was passed to the constructor.

    Every field is type-checked when it is set (constructor, attribute assignment,
    ``set_configuration_options``, environment): bools take only ``True``/``False``, ints only ints, enum
    fields the enum or its name (which is converted), and a wrong value raises ConfigError naming the field
    and what it accepts.
    """

    # mode
    enable_training: bool = False
    enable_recompute: bool = False
    # Microbatches of saved activations a training netlist's forward->backward DRAM queues hold (None: the
    # larger of 8 and the pipeline's microbatch_count; run_backward must follow at most that many forwards).
    training_saved_microbatches: Optional[int] = None
    compile_depth: CompileDepth = CompileDepth.FULL
    device_mode: DeviceMode = DeviceMode.CompileAndRun
    # balancer / placer
    balancer_policy: str = "NLP"
    scheduler_policy: str = "ModuleInputsBFS"
    enable_t_streaming: bool = True
    manual_t_streaming: bool = False
    use_interactive_placer: bool = True
    enable_enumerate_u_kt: bool = True
    enable_auto_transposing_placement: bool = False
    chip_placement_policy: str = "MMIO_LAST"
    #: Each entry: an op name (break at it), a ``pybuda.query`` predicate (break at the first op it matches, in
    #: schedule order) or a list of either (break at the first of them in schedule order), as TT-Buda.
    op_names_to_epoch_break: List[Any] = field(default_factory=list)
    op_names_to_chip_break: List[Any] = field(default_factory=list)
    balancer_op_overrides: Dict[str, OpOverride] = field(default_factory=dict)
    #: op name or ``pybuda.query`` predicate → its placer override
    placer_op_overrides: Dict[Any, PlacerOverride] = field(default_factory=dict)
    #: ``add_schedule_constraint``: each list of op names is scheduled in that order.
    scheduler_constraints: List[List[str]] = field(default_factory=list)
    #: ``insert_fracture_group``: (nodes [(name, dims, factors)], {name: chip ids}).
    fracture_groups: List[Any] = field(default_factory=list)
    #: ``set_num_repeated_patterns``: module name → number of repeated patterns.
    tvm_module_to_num_patterns: Dict[str, int] = field(default_factory=dict)
    default_dram_parameters: Optional[bool] = None
    random_policy_seed: int = 0
    num_chips: int = 1
    # graph passes
    enable_consteval: bool = True
    #: At LoFi, keep the multiplier unbiased where that is free: eltwise ops run at HiFi2 (they are
    #: unpack-bound), and the host rounds weights that only LoFi matmuls read to the 4 mantissa bits those
    #: read, instead of letting the multiplier truncate them (``pybuda.passes.lowered.lofi_weights``).
    lofi_rounding: bool = True
    #: Run exp in the SFPU's approximate mode (``approximate_mode: true``; TT-Buda's ``PYBUDA_EXP_APPROX``,
    #: which its published BERT runs set): under half exp's cycles, results up to 6 % high
    #: (``pybuda.passes.lowered.approximate_sfpu``).
    exp_approx: bool = False
    enable_auto_fusing: bool = True
    op_names_dont_fuse: List[str] = field(default_factory=list)
    #: ``insert_nop`` / ``insert_buffering_nop`` requests, in call order.
    buffering_nops_to_insert: List[NopInsertion] = field(default_factory=list)
    enable_conv_prestride: bool = True
    enable_stable_softmax: bool = True
    # frontend
    enable_tvm_cpu_fallback: bool = True
    cpu_fallback_ops: List[str] = field(default_factory=lambda: ["embedding"])
    enable_tm_cpu_fallback: bool = False
    tm_cpu_fallback_max_depth: int = 10
    # numerics
    default_df_override: Optional[DataFormat] = None
    default_accumulate_df: Optional[DataFormat] = None
    default_math_fidelity: MathFidelity = MathFidelity.HiFi3
    fp32_fallback: DataFormat = DataFormat.Float16_b
    amp_level: Optional[int] = None
    amp_properties: List[AMPNodeProperties] = field(default_factory=list)
    # backend / io
    performance_trace: PerfTraceLevel = PerfTraceLevel.NONE
    backend_opt_level: int = 4
    backend_output_dir: Optional[str] = None
    backend_device_descriptor_path: str = ""
    backend_cluster_descriptor_path: str = ""
    backend_runtime_params_path: str = ""
    backend_runtime_args: str = ""
    store_backend_db_to_yaml: bool = False
    input_queues_on_host: bool = True
    output_queues_on_host: bool = True
    dram_placement_algorithm: DRAMPlacementAlgorithm = DRAMPlacementAlgorithm.ROUND_ROBIN
    manual_dram_queue_placement: Dict[str, Tuple[Optional[int], Optional[int]]] = field(default_factory=dict)
    harvesting_mask: int = 0
    harvested_rows: List[int] = field(default_factory=list)  # NoC rows, as TT-Buda's set_configuration_options
    device_config: Optional[str] = None
    enable_device_tilize: bool = False
    enable_forked_dram_inputs: bool = False
    op_intermediates_to_save: List[str] = field(default_factory=list)
    # The golden backend applies every data format and math fidelity unless this is set (then it runs
    # plain float32, TT-Buda's golden default); PYBUDA_GOLDEN_FAST=1 sets it.
    golden_ignore_df_precision: bool = False

    def __setattr__(self, name: str, value: Any) -> None:
        # Checked here, not only in set_configuration_options, because TT-Buda scripts also assign fields
        # of the global config directly (``compiler_cfg.enable_auto_fusing = False``).
        if name in _config_field_types():
            value = _check_config_value(name, value)
        object.__setattr__(self, name, value)

    def __post_init__(self) -> None:
        given = self.__dict__.pop("_given_fields", frozenset())
        env = read_env()
        self._apply_env(env.config, skip=given)
        if "amp_properties" not in given:
            self._apply_amp_light(env.amp_light)

    def apply_env_config_overrides(self) -> None:
        """Apply the PYBUDA_* environment variables that mirror config fields, over any value set before
        (TT-Buda's method; a new config already has them, and compiles do not call it)."""
        env = read_env()
        self._apply_env(env.config)
        self._apply_amp_light(env.amp_light)

    def _apply_amp_light(self, raw: Optional[str]) -> None:
        """``PYBUDA_AMP_LIGHT=<1|2|3>``: :meth:`enable_amp_light` at that level (0 or unset: nothing), once."""
        if raw is None or raw.strip() in ("", "0"):
            return
        try:
            level = int(raw)
        except ValueError:
            raise ConfigError(f"environment variable PYBUDA_AMP_LIGHT={raw!r}: must be 1, 2 or 3") from None
        if level not in (1, 2, 3):
            raise ConfigError(f"environment variable PYBUDA_AMP_LIGHT={raw!r}: must be 1, 2 or 3")
        before = list(self.amp_properties)
        self.enable_amp_light(level)
        if self.amp_properties[-1] in before:  # already applied (apply_env_config_overrides called again)
            self.amp_properties.pop()

    def _apply_env(self, values: Mapping[str, str], skip: Any = frozenset()) -> None:
        for var, raw in values.items():
            name, parse = ENV_CONFIG_FIELDS[var]
            if name in skip:
                continue
            try:
                value = parse(raw)
            except ConfigError:
                raise
            except ValueError as e:
                raise ConfigError(f"environment variable {var}={raw!r}: {e}") from None
            if value is not _LEAVE:
                try:
                    setattr(self, name, value)
                except ConfigError as e:
                    raise ConfigError(f"environment variable {var}={raw!r}: {e}") from None

    # --- helpers (TT-Buda method names) ----------------------------------------------------------
    def balancer_op_override(self, op_name: str, attribute: str, value: Any) -> None:
        if not isinstance(op_name, str):
            raise ConfigError(f"balancer override '{attribute}': the op name must be a string, got {op_name!r}")
        if attribute not in {f.name for f in fields(OpOverride)}:
            raise ConfigError(f"unknown balancer override '{attribute}'; expected one of "
                              f"{[f.name for f in fields(OpOverride)]}")
        override = self.balancer_op_overrides.setdefault(op_name, OpOverride())
        if isinstance(value, dict):  # TT-Buda merges dict-valued overrides (input_buffer_multiplier)
            value = {**(getattr(override, attribute) or {}), **value}
        setattr(override, attribute, tuple(value) if isinstance(value, list) else value)

    def place_on_new_epoch(self, op_names: Any) -> None:
        """Break the epoch at the op appearing first in the schedule among ``op_names`` (a name, a
        ``pybuda.query`` predicate, or a list of them)."""
        self.op_names_to_epoch_break.append(_break_entry("set_epoch_break", op_names))

    def place_on_new_chip(self, op_names: Any) -> None:
        """Start a new chip at the op appearing first in the schedule among ``op_names``."""
        self.op_names_to_chip_break.append(_break_entry("set_chip_break", op_names))

    def place_queue_to_chip_dram(self, dram_queue: str, *, chip_id: Optional[int], channel: Optional[int]) -> None:
        self.manual_dram_queue_placement[dram_queue] = (chip_id, channel)

    def dont_fuse(self, op_names: Union[str, Sequence[str]]) -> None:
        self.op_names_dont_fuse.extend(_names(op_names))

    def enable_amp_light(self, level: int = 1) -> None:
        if level not in (1, 2, 3):
            raise ConfigError(f"AMP light level must be 1, 2 or 3, got {level}")
        df = DataFormat.Bfp8_b if level == 1 else DataFormat.Bfp4_b
        fid = MathFidelity.LoFi if level == 3 else MathFidelity.HiFi2
        self.amp_properties.append(AMPNodeProperties(op_type="matmul", math_fidelity=fid,
                                                     input_df={1: (df, False), 2: (df, False)},
                                                     strict_input_df=False))

    def resolved_harvesting_mask(self, arch: Any) -> int:
        """The harvesting mask for ``arch``: from ``harvested_rows`` (NoC rows) when given, else the mask."""
        if self.harvested_rows:
            from pybuda.arch.descriptor import harvesting_mask_from_noc_rows

            return harvesting_mask_from_noc_rows(arch, self.harvested_rows)
        return self.harvesting_mask

    def snapshot(self) -> "CompilerConfig":
        """A deep copy, frozen into a compile result and device images. This is where a compile starts,
        so the compile-time rules of :data:`OPTION_RULES` run here (:func:`check_compile_options`)."""
        return check_compile_options(copy.deepcopy(self))

    def to_dict(self) -> Dict[str, Any]:
        """JSON-friendly dict (enums by name)."""
        return _to_jsonable(asdict(self))


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


def _to_jsonable(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.name
    if _is_predicate(value):
        return value.to_json()
    if isinstance(value, dict):
        return {str(k): _to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_jsonable(v) for v in value]
    return value


_global_config: Optional[CompilerConfig] = None


def _get_global_compiler_config() -> CompilerConfig:
    """The global config, created on first use and after a reset: the PYBUDA_* config variables apply to it
    then, once (compiles snapshot it and do not read the environment again)."""
    global _global_config
    if _global_config is None:
        _global_config = CompilerConfig()
    return _global_config


def _set_global_compiler_config(config: CompilerConfig) -> None:
    global _global_config
    _global_config = config


def _clear_global_compiler_config() -> None:
    global _global_config
    _global_config = None


# Keyword names that differ from CompilerConfig field names.
_KWARG_TO_FIELD = {"accumulate_df": "default_accumulate_df", "math_fidelity": "default_math_fidelity"}
#: Keywords TT-Buda's set_configuration_options accepted and ignored; pybuda says so once (OPTION_RULES).
_IGNORED_KWARGS = {"place_on_one_row", "use_interactive_placer_v2"}


def set_configuration_options(**kwargs: Any) -> None:
    """Set global compile options (TT-Buda's keyword names); unknown names raise ConfigError."""
    config = _get_global_compiler_config()
    valid = {f.name for f in fields(CompilerConfig)}
    for key, value in kwargs.items():
        if value is None:
            continue
        if key in _IGNORED_KWARGS:
            log_once(key, OPTION_RULES[key].why)
            continue
        if key == "harvested_rows":
            # TT-Buda takes NoC row indices (GS: 1-5, 7-11); they become a mask of logical harvest
            # indices once the arch is known (CompilerConfig.resolved_harvesting_mask).
            config.harvested_rows = _harvested_rows(value)
            continue
        if key == "balancer_policy" and value not in BALANCER_POLICIES and value != "default":
            raise ConfigError(f"unknown balancer_policy '{value}'; expected one of {list(BALANCER_POLICIES)}")
        name = _KWARG_TO_FIELD.get(key, key)
        if name not in valid:
            raise ConfigError(f"set_configuration_options: unknown option '{key}'")
        if name == "balancer_policy" and value == "default":
            value = "NLP"
        # CompilerConfig.__setattr__ type-checks the value (and turns enum names into enums).
        setattr(config, name, value)


_FIELD_TYPES: Optional[Dict[str, Any]] = None

#: Fields that take one of a fixed set of strings.
_FIELD_CHOICES: Dict[str, Sequence[str]] = {"balancer_policy": BALANCER_POLICIES}


def _config_field_types() -> Dict[str, Any]:
    # Resolved once, lazily: the annotations are strings (``from __future__ import annotations``).
    global _FIELD_TYPES
    if _FIELD_TYPES is None:
        hints = get_type_hints(CompilerConfig)
        _FIELD_TYPES = {f.name: hints[f.name] for f in fields(CompilerConfig)}
    return _FIELD_TYPES


def _check_config_value(name: str, value: Any) -> Any:
    """``value`` checked against the type of CompilerConfig field ``name`` (enum names become enums);
    ConfigError naming the field and the accepted values otherwise."""
    value = _coerce(name, _config_field_types()[name], value)
    choices = _FIELD_CHOICES.get(name)
    if choices is not None and value is not None and value not in choices:
        raise ConfigError(f"config option '{name}': unknown value {value!r}; expected one of {list(choices)}")
    return apply_set_rule(name, value)


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


def set_epoch_break(op_names: Union[str, "query.NodePredicateBuilder", List[Any]]) -> None:
    """Instruct place & route to start a new placement epoch on the given op(s): an op name, a
    ``pybuda.query`` predicate, or a list of them (the epoch starts at the first of them in schedule order).
    The op is kept out of fusion so that the break survives; an unknown name is a ConfigError at compile."""
    _get_global_compiler_config().place_on_new_epoch(op_names)


def set_chip_break(op_names: Union[str, "query.NodePredicateBuilder", List[Any]]) -> None:
    """Instruct place & route to start placing ops on the next chip in the pipeline (same forms as
    :func:`set_epoch_break`)."""
    _get_global_compiler_config().place_on_new_chip(op_names)


def override_op_size(op_name: str, grid_size: Tuple[int, int]) -> None:
    """Override automatic op sizing with given grid size (rows, columns)."""
    if len(grid_size) != 2 or not all(isinstance(v, int) and v > 0 for v in grid_size):
        raise ConfigError(f"override_op_size('{op_name}'): grid size must be two positive ints, got {grid_size!r}")
    _get_global_compiler_config().balancer_op_override(op_name, "grid_shape", tuple(grid_size))


def override_t_stream_dir(op_name: str, direction: Optional[str]) -> None:
    """Set the t-streaming direction of an op: 'r', 'c', 'rz', 'cz' or 'n'/None (no streaming)."""
    if direction not in ("r", "c", "rz", "cz", "n", None):
        raise ConfigError(f"override_t_stream_dir('{op_name}'): unknown direction {direction!r}")
    _get_global_compiler_config().balancer_op_override(op_name, "t_stream_dir", direction or "n")


def override_t_stream_shape(op_name: str, shape: Tuple[int, int]) -> None:
    """Set t-stream factors (r, c); one must be 1; (1, 1) disables streaming."""
    if len(shape) != 2 or min(shape) < 1 or (shape[0] > 1 and shape[1] > 1):
        raise ConfigError(f"override_t_stream_shape('{op_name}'): one factor of {shape!r} must be 1")
    _get_global_compiler_config().balancer_op_override(op_name, "t_stream_shape", tuple(shape))


def override_u_kt(op_name: str, u_kt: int) -> None:
    """Set a matmul's inner-dimension block (u_kt tiles)."""
    if not isinstance(u_kt, int) or u_kt < 1:
        raise ConfigError(f"override_u_kt('{op_name}'): u_kt must be a positive int, got {u_kt!r}")
    _get_global_compiler_config().balancer_op_override(op_name, "u_kt", u_kt)


def override_dram_parameters(op_name: str, force: bool) -> None:
    """Keep an op's parameters in DRAM (True) instead of prologue L1."""
    _get_global_compiler_config().balancer_op_override(op_name, "force_dram_parameters", bool(force))


def override_op_placement(op_name: Any, *, start: Optional[Tuple[int, int]] = None, transpose_op: bool = False,
                          chip_id: Optional[int] = None, spatial_epoch_break: bool = False,
                          temporal_epoch_break: bool = False) -> None:
    """Pin an op's placement (start core, transpose, chip) or break an epoch at it. ``op_name`` is an op name
    or a ``pybuda.query`` predicate (every op it matches gets the override)."""
    if not (isinstance(op_name, str) or _is_predicate(op_name)):
        raise ConfigError(f"override_op_placement: op_name must be a string or a pybuda.query predicate, "
                          f"got {op_name!r}")
    if not isinstance(transpose_op, bool):
        raise ConfigError(f"override_op_placement('{op_name}'): transpose_op must be True or False")
    if start is not None and (len(tuple(start)) != 2 or not all(isinstance(v, int) and v >= 0 for v in start)):
        raise ConfigError(f"override_op_placement('{op_name}'): start must be two non-negative ints, got {start!r}")
    _get_global_compiler_config().placer_op_overrides[op_name] = PlacerOverride(
        tuple(start) if start else None, transpose_op, chip_id, spatial_epoch_break, temporal_epoch_break)


def override_dram_queue_placement(queue_name: str, *, chip_id: Optional[int] = None, channel: Optional[int] = None) -> None:
    """Pin a DRAM queue to a chip and channel."""
    _get_global_compiler_config().manual_dram_queue_placement[queue_name] = (chip_id, channel)


def override_input_buffer_multiplier(op_name: str, operand_index: int, *, multiplier: int) -> None:
    """Multiply the input buffer of operand ``operand_index`` of ``op_name`` by ``multiplier``: the balancer
    sizes that buffer (and the op's L1) accordingly and the netlist op carries it as
    ``input_buf_min_size_tiles``."""
    if not isinstance(operand_index, int) or isinstance(operand_index, bool) or operand_index < 0:
        raise ConfigError(f"override_input_buffer_multiplier('{op_name}'): operand_index must be a non-negative "
                          f"int, got {operand_index!r}")
    if not isinstance(multiplier, int) or isinstance(multiplier, bool) or multiplier < 1:
        raise ConfigError(f"override_input_buffer_multiplier('{op_name}'): multiplier must be a positive int, "
                          f"got {multiplier!r}")
    _get_global_compiler_config().balancer_op_override(op_name, "input_buffer_multiplier",
                                                       {operand_index: multiplier})


def internal_override_output_buffer_multiplier(op_name: str, *, multiplier: int) -> None:
    """Set an op's output buffering (``buf_size_mb``); TT-Buda's internal API (it could hang silicon)."""
    if not isinstance(multiplier, int) or isinstance(multiplier, bool) or multiplier < 1:
        raise ConfigError(f"internal_override_output_buffer_multiplier('{op_name}'): multiplier must be a positive "
                          f"int, got {multiplier!r}")
    log.warning("internal_override_output_buffer_multiplier is an internal API and may result in hangs on silicon")
    _get_global_compiler_config().balancer_op_override(op_name, "output_buffer_multiplier", multiplier)


def insert_nop(src_op: str, dest_ops: Union[str, Sequence[str]], *, hoist_tms: bool = True, nop_count: int = 1,
               daisy_chain: bool = False) -> None:
    """Insert ``nop_count`` buffering nop(s) on the edges ``src_op`` → ``dest_ops`` of the compiled graph.

    ``hoist_tms``: the edge's TMs move onto the ``src_op`` → nop edge (True) or stay on the nop → dest edge.
    ``daisy_chain``: with several destinations, a chain of nops passing each destination in turn instead of
    one nop forking to all of them. The nops appear in the netlist; the numerics do not change."""
    if not isinstance(src_op, str):
        raise ConfigError(f"insert_nop: src_op must be an op name, got {src_op!r}")
    dests = [dest_ops] if isinstance(dest_ops, str) else list(dest_ops) if isinstance(dest_ops, (list, tuple)) else None
    if not dests or not all(isinstance(d, str) for d in dests):
        raise ConfigError(f"insert_nop('{src_op}'): dest_ops must be an op name or a non-empty list of names, "
                          f"got {dest_ops!r}")
    for flag, value in (("hoist_tms", hoist_tms), ("daisy_chain", daisy_chain)):
        if not isinstance(value, bool):
            raise ConfigError(f"insert_nop('{src_op}'): {flag} must be True or False, got {value!r}")
    if not isinstance(nop_count, int) or isinstance(nop_count, bool) or nop_count < 1:
        raise ConfigError(f"insert_nop('{src_op}'): nop_count must be a positive int, got {nop_count!r}")
    _get_global_compiler_config().buffering_nops_to_insert.append(
        NopInsertion(src_op, dests, hoist_tms, nop_count, daisy_chain))


def insert_buffering_nop(src_op: str, dest_ops: Union[str, Sequence[str]], *, hoist_tms: bool = True,
                         nop_count: int = 1, daisy_chain: bool = False) -> None:
    """TT-Buda's older name of :func:`insert_nop` (deprecated there); the same request."""
    insert_nop(src_op, dest_ops, hoist_tms=hoist_tms, nop_count=nop_count, daisy_chain=daisy_chain)


def add_schedule_constraint(partial_ordering: List[str]) -> None:
    """Schedule the named ops in the given order (``partial_ordering[i]`` before ``partial_ordering[i+1]``);
    the placer follows the schedule, so they are also placed in that order."""
    if not isinstance(partial_ordering, (list, tuple)) or len(partial_ordering) < 2 or \
            not all(isinstance(n, str) for n in partial_ordering):
        raise ConfigError(f"add_schedule_constraint: expected a list of at least two op names, got {partial_ordering!r}")
    _get_global_compiler_config().scheduler_constraints.append(list(partial_ordering))


def insert_fracture_group(nodes: List[Any], chip_ids: Union[List[int], Dict[str, List[int]], None] = None) -> None:
    """TT-Buda's fracture group: ``nodes`` are names or ``(name, dim(s), factor(s))``; ``chip_ids`` a list or
    ``{name: [chip ids]}``. Checked here; pybuda does not fracture, so a compile with a fracture group raises
    ConfigError naming its ops (see ``pybuda.passes.lowered.overrides``)."""
    if not isinstance(nodes, (list, tuple)) or not nodes:
        raise ConfigError(f"insert_fracture_group: nodes must be a non-empty list, got {nodes!r}")
    group = []
    for node in nodes:
        if isinstance(node, str):
            group.append((node, [], []))
            continue
        if not isinstance(node, (list, tuple)) or len(node) != 3 or not isinstance(node[0], str):
            raise ConfigError(f"insert_fracture_group: each node is a name or (name, dim(s), factor(s)), got {node!r}")
        dims = [node[1]] if isinstance(node[1], int) else list(node[1])
        factors = [node[2]] if isinstance(node[2], int) else list(node[2])
        if len(dims) != len(factors) or not all(isinstance(v, int) for v in dims + factors):
            raise ConfigError(f"insert_fracture_group: '{node[0]}': dims and factors must be ints of equal count")
        group.append((node[0], dims, factors))
    chip_ids = [] if chip_ids is None else chip_ids
    if isinstance(chip_ids, (list, tuple)):
        chip_ids = {name: list(chip_ids) for name, _, _ in group}
    elif not isinstance(chip_ids, dict):
        raise ConfigError(f"insert_fracture_group: chip_ids must be a list or a dict, got {chip_ids!r}")
    _get_global_compiler_config().fracture_groups.append((group, dict(chip_ids)))


#: Why ``set_num_repeated_patterns`` changes nothing here (logged once).
REPEATED_PATTERNS_WHY = (
    "TT-Buda read it only in its TVM frontend, to compact a module's repeated layers into one pattern and speed "
    "up compilation; it never changed the netlist. pybuda's frontends do not go through TVM, so the hint is "
    "recorded in the config (tvm_module_to_num_patterns) and otherwise unused")


def set_num_repeated_patterns(module_name: str, num_patterns: int) -> None:
    """TT-Buda's hint of how many repeated patterns (layers) ``module_name`` has; recorded, logged once."""
    if not isinstance(module_name, str):
        raise ConfigError(f"set_num_repeated_patterns: module_name must be a string, got {module_name!r}")
    if not isinstance(num_patterns, int) or isinstance(num_patterns, bool) or num_patterns < 1:
        raise ConfigError(f"set_num_repeated_patterns('{module_name}'): num_patterns must be a positive int, "
                          f"got {num_patterns!r}")
    _get_global_compiler_config().tvm_module_to_num_patterns[module_name] = num_patterns
    log_once("set_num_repeated_patterns", REPEATED_PATTERNS_WHY)


def set_auto_transposing_placement(is_enabled: bool) -> None:
    """Enable or disable auto-transposing placement."""
    _get_global_compiler_config().enable_auto_transposing_placement = is_enabled


def configure_mixed_precision(*, op_type: Optional[str] = None, epoch_type: Optional[str] = None,
                              output_df: Optional[DataFormat] = None, intermediate_df: Optional[DataFormat] = None,
                              accumulate_df: Optional[DataFormat] = None, math_fidelity: Optional[MathFidelity] = None,
                              name_regex: Optional[str] = None,
                              input_df: Optional[Dict[int, Tuple[DataFormat, bool]]] = None,
                              is_gradient_op: Optional[bool] = None,
                              input_parameter_indices_to_optimize: Optional[List[Tuple[int, int]]] = None) -> None:
    """Add a mixed-precision rule; later rules win over earlier ones for the fields they set."""
    if epoch_type not in (None, "fwd", "bwd", "opt"):
        raise ConfigError(f"configure_mixed_precision: epoch_type must be 'fwd', 'bwd' or 'opt', got {epoch_type!r}")
    if name_regex is not None:
        try:
            re.compile(name_regex)
        except re.error as e:
            raise ConfigError(f"configure_mixed_precision: bad name_regex {name_regex!r}: {e}") from None
    where = "configure_mixed_precision"
    output_df, intermediate_df, accumulate_df = (
        None if v is None else config_enum(f"{where}: {k}", DataFormat, v)
        for k, v in (("output_df", output_df), ("intermediate_df", intermediate_df), ("accumulate_df", accumulate_df)))
    if math_fidelity is not None:
        math_fidelity = config_enum(f"{where}: math_fidelity", MathFidelity, math_fidelity)
    if input_df is not None:
        input_df = _input_df(where, input_df)
    _get_global_compiler_config().amp_properties.append(AMPNodeProperties(
        op_type, epoch_type, output_df, intermediate_df, accumulate_df, math_fidelity, name_regex, input_df,
        is_gradient_op, input_parameter_indices_to_optimize))


def _input_df(where: str, input_df: Any) -> Dict[int, Tuple[DataFormat, bool]]:
    # Checked when the rule is made (index type, format name); whether the index exists on the ops the
    # rule matches is only known at compile time (passes/lowered/data_formats.py checks it there).
    if not isinstance(input_df, dict):
        raise ConfigError(f"{where}: input_df must be a dict {{operand index: (format, include_activations)}}, "
                          f"got {input_df!r}")
    out: Dict[int, Tuple[DataFormat, bool]] = {}
    for index, spec in input_df.items():
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise ConfigError(f"{where}: input_df index must be a non-negative int, got {index!r}")
        df, include = spec if isinstance(spec, (tuple, list)) and len(spec) == 2 else (spec, False)
        if not isinstance(include, bool):
            raise ConfigError(f"{where}: input_df[{index}] include_activations must be True or False, "
                              f"got {include!r}")
        out[index] = (config_enum(f"{where}: input_df[{index}]", DataFormat, df), include)
    return out


def add_cpu_fallback_ops(op_types: Union[str, Sequence[str]]) -> None:
    """Add op types that always run on the CPU."""
    cfg = _get_global_compiler_config()
    for t in _names(op_types):
        if t not in cfg.cpu_fallback_ops:
            cfg.cpu_fallback_ops.append(t)


def remove_cpu_fallback_ops(op_types: Union[str, Sequence[str]]) -> None:
    """Remove op types from the CPU fallback list."""
    cfg = _get_global_compiler_config()
    cfg.cpu_fallback_ops = [t for t in cfg.cpu_fallback_ops if t not in _names(op_types)]


# --- the environment (read here and nowhere else) ------------------------------------------------------------
_LEAVE = object()  # an env value that leaves its config field alone (e.g. PYBUDA_DISABLE_OP_FUSING=0)


def _only_if_one(value: Any) -> Callable[[str], Any]:
    return lambda raw: value if raw == "1" else _LEAVE


#: PYBUDA_* variables that mirror CompilerConfig fields (TT-Buda's ``apply_env_config_overrides``), in the
#: order they apply: the field each sets, and how its raw value becomes the field's value.
ENV_CONFIG_FIELDS: Dict[str, Tuple[str, Callable[[str], Any]]] = {
    "PYBUDA_COMPILE_DEPTH": ("compile_depth", CompileDepth.from_string),
    "PYBUDA_BALANCER_POLICY_TYPE": ("balancer_policy", str),
    "PYBUDA_DISABLE_OP_FUSING": ("enable_auto_fusing", _only_if_one(False)),
    "PYBUDA_DISABLE_LOFI_ROUNDING": ("lofi_rounding", _only_if_one(False)),
    "PYBUDA_EXP_APPROX": ("exp_approx", lambda raw: raw != "0"),  # TT-Buda: set at all means on
    "PYBUDA_DEFAULT_DF": ("default_df_override", DataFormat.from_json),
    "PYBUDA_AMP_LEVEL": ("amp_level", int),
    "PYBUDA_OVERRIDE_NUM_CHIPS": ("num_chips", int),
    "PYBUDA_DISABLE_STABLE_SOFTMAX": ("enable_stable_softmax", _only_if_one(False)),
    "PYBUDA_ENABLE_T_STREAMING": ("enable_t_streaming", lambda raw: raw == "1"),
    "PYBUDA_GOLDEN_FAST": ("golden_ignore_df_precision", _only_if_one(True)),
    "PYBUDA_BALANCER_RANDOM_POLICY_SEED": ("random_policy_seed", int),
}


@dataclass(frozen=True)
class RuntimeEnv:
    """The environment variables the runtime honours (TT-Buda's names, plus PYBUDA_FORCE_CONCURRENT).

    - ``PYBUDA_FORCE_SEQUENTIAL=1``: run every device inline in the caller (no threads or processes).
    - ``PYBUDA_FORCE_THREADS=1``: concurrent mode uses one thread per device instead of a process.
    - ``PYBUDA_FORCE_CONCURRENT=1``: run concurrently even when a TTDevice is Golden (the simulated
      chip), which otherwise forces sequential mode as in TT-Buda.
    - ``PYBUDA_DEVMODE``: TTDevice's devtype defaults to Golden without the "no silicon" notice.
    - ``GOLDEN_WORMHOLE_B0`` / ``PYBUDA_GOLDEN_BLACKHOLE``: default arch of a Golden TTDevice.
    """

    force_sequential: bool = False
    force_threads: bool = False
    force_concurrent: bool = False
    devmode: bool = False
    golden_wormhole_b0: bool = False
    golden_blackhole: bool = False


@dataclass(frozen=True)
class EnvSettings:
    """Every environment variable pybuda honours, as :func:`read_env` found it.

    - ``config``: the PYBUDA_* variables of :data:`ENV_CONFIG_FIELDS` that are set (raw values; a
      CompilerConfig parses them when it is created);
    - ``runtime``: the runtime switches (:class:`RuntimeEnv`);
    - ``build_dir``: ``PYBUDA_BUILD_DIR`` (None when unset or empty);
    - ``graph_name_suffix``: ``PYBUDA_GRAPH_NAME_SUFFIX``, appended to every module's name;
    - ``log_level``: ``PYBUDA_LOG_LEVEL`` for the ``pybuda`` command (default WARNING);
    - ``verify_golden``: ``PYBUDA_VERIFY_GOLDEN``, VerifyConfig's ``run_golden`` default;
    - ``golden_quantize``: ``TT_BACKEND_GOLDEN_QUANTIZE``, which turns VerifyConfig's
      ``golden_ignore_df_precision`` default off.
    """

    config: Mapping[str, str] = field(default_factory=dict)
    runtime: RuntimeEnv = field(default_factory=RuntimeEnv)
    build_dir: Optional[str] = None
    graph_name_suffix: str = ""
    log_level: str = "WARNING"
    verify_golden: bool = False
    golden_quantize: bool = False
    #: ``PYBUDA_AMP_LIGHT`` (raw): a new CompilerConfig calls ``enable_amp_light(level)``.
    amp_light: Optional[str] = None
    #: ``PYBUDA_N300_DATA_PARALLEL``: a ConfigError at compile (see OPTION_RULES).
    n300_data_parallel: bool = False
    #: ``PYBUDA_EMULATE_SILICON_DEVICE``: detect_available_devices reports a (simulated) card.
    emulate_silicon_device: bool = False
    #: ``PYBUDA_GOLDEN_NATIVE``: ``0`` keeps the golden backend off its native kernels (torch only).
    golden_native: bool = True
    #: Where built native kernels are kept: ``PYBUDA_CACHE_DIR``, else ``$XDG_CACHE_HOME/pybuda``, else
    #: ``~/.cache/pybuda``.
    cache_dir: str = ""


def _env_flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


def _env_set(env: Mapping[str, str], name: str) -> bool:
    # TT-Buda's verification flags: anything but unset, empty or "0" turns them on.
    return env.get(name, "0") not in ("", "0")


def read_env() -> EnvSettings:
    """Read every environment variable pybuda honours (the one place that reads ``os.environ``).

    Read at each call, not cached: tests and scripts change the environment between runs.
    """
    env = os.environ
    return EnvSettings(
        config={var: env[var] for var in ENV_CONFIG_FIELDS if var in env},
        runtime=RuntimeEnv(
            force_sequential=_env_flag(env, "PYBUDA_FORCE_SEQUENTIAL"),
            force_threads=_env_flag(env, "PYBUDA_FORCE_THREADS"),
            force_concurrent=_env_flag(env, "PYBUDA_FORCE_CONCURRENT"),
            devmode="PYBUDA_DEVMODE" in env,
            golden_wormhole_b0=_env_flag(env, "GOLDEN_WORMHOLE_B0"),
            golden_blackhole=_env_flag(env, "PYBUDA_GOLDEN_BLACKHOLE"),
        ),
        build_dir=env.get("PYBUDA_BUILD_DIR") or None,
        graph_name_suffix=env.get("PYBUDA_GRAPH_NAME_SUFFIX", ""),
        log_level=env.get("PYBUDA_LOG_LEVEL", "WARNING"),
        verify_golden=_env_set(env, "PYBUDA_VERIFY_GOLDEN"),
        golden_quantize=_env_set(env, "TT_BACKEND_GOLDEN_QUANTIZE"),
        amp_light=env.get("PYBUDA_AMP_LIGHT"),
        n300_data_parallel=_env_set(env, "PYBUDA_N300_DATA_PARALLEL"),
        emulate_silicon_device=_env_set(env, "PYBUDA_EMULATE_SILICON_DEVICE"),
        golden_native=env.get("PYBUDA_GOLDEN_NATIVE", "1").strip().lower() not in ("0", "false", "no", "off"),
        cache_dir=env.get("PYBUDA_CACHE_DIR") or os.path.join(
            env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "pybuda"),
    )


def set_env(settings: Mapping[str, str]) -> None:
    """Set environment variables in this process (``pybuda benchmark -e``, as benchmarking's ``-e`` did): the
    one place besides :func:`read_env` that touches ``os.environ``. Configs created afterwards see them."""
    os.environ.update({str(k): str(v) for k, v in settings.items()})


def runtime_env() -> RuntimeEnv:
    """Current runtime switches, read from the environment at each call (tests may change them)."""
    return read_env().runtime


def build_dir() -> str:
    """The compile build directory: ``$PYBUDA_BUILD_DIR`` if set, else ``./tt_build`` (netlists, configs,
    placement reports are written here)."""
    return read_env().build_dir or os.path.join(os.getcwd(), "tt_build")
