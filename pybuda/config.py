"""Compiler configuration: one :class:`CompilerConfig`, the global instance and ``set_configuration_options``.

``set_configuration_options`` and the ``override_*`` / ``set_*_break`` / ``configure_mixed_precision``
functions edit the global instance, as in TT-Buda; compile snapshots it (``snapshot``) and stores it
with the netlist and the device image.

Environment variables are read here and nowhere else: :func:`read_env` reads every one pybuda honours
into a plain :class:`EnvSettings` record, and the rest of the package asks it. The PYBUDA_* variables that
mirror config fields are defaults: a ``CompilerConfig`` takes them when it is created (so the global
config takes them once, when it is created or reset) for the fields its caller did not pass, and a
compile never applies them again, so an explicit config or a ``set_configuration_options`` call beats
the environment.

The parts this module re-exports, so that every name is still imported from ``pybuda.config``:
:mod:`~pybuda.config_types` (the option enums and per-op override records), :mod:`~pybuda.config_checks`
(value checks), :mod:`~pybuda.config_overrides` (the override APIs), :mod:`~pybuda.config_env` (the
environment variables' table and records) and :mod:`~pybuda.option_rules`.
"""

from __future__ import annotations

import copy
import enum
import functools
import os
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union, get_type_hints

from pybuda.config_checks import _break_entry, _coerce, _harvested_rows, _is_predicate, _names
from pybuda.config_env import _LEAVE, ENV_CONFIG_FIELDS, EnvSettings, RuntimeEnv, env_settings
from pybuda.config_types import (BALANCER_POLICIES, AMPNodeProperties, CompileDepth, DeviceMode,
                                 DRAMPlacementAlgorithm, NopInsertion, OpOverride, PerfTraceLevel, PlacerOverride)
from pybuda.dtypes import DataFormat, MathFidelity
from pybuda.errors import ConfigError
# The table of options pybuda cannot honour (or TT-Buda ignored) and its checks; re-exported for callers.
from pybuda.option_rules import (  # noqa: F401
    OPTION_RULES, apply_set_rule, check_compile_options, log_once, resolve_device_config, write_backend_db,
)

# Re-exported: callers (and ``pybuda/__init__.py``) import these names from pybuda.config.
import pybuda.query as query  # noqa: F401  TT-Buda's config imports it too: ``pybuda.query`` is reachable from here
from pybuda.config_checks import config_enum  # noqa: F401
from pybuda.config_overrides import (  # noqa: F401
    REPEATED_PATTERNS_WHY, add_cpu_fallback_ops, add_schedule_constraint, configure_mixed_precision,
    insert_buffering_nop, insert_fracture_group, insert_nop, internal_override_output_buffer_multiplier,
    override_dram_parameters, override_dram_queue_placement, override_input_buffer_multiplier,
    override_op_placement, override_op_size, override_t_stream_dir, override_t_stream_shape, override_u_kt,
    remove_cpu_fallback_ops, set_auto_transposing_placement, set_chip_break, set_epoch_break,
    set_num_repeated_patterns,
)
from pybuda.config_types import DEVICE_CONFIGS  # noqa: F401


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
    #: Copy Float32 data that picker matmuls move (unaligned slices, concatenations, gathers) in pieces that
    #: pass the source registers whole, instead of truncated to 9-10 mantissa bits as TT-Buda's pickers do.
    #: Costs up to eight more ops per such picker (``pybuda.passes.lowered.exact_pickers``).
    exact_data_movement: bool = True
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
    # The golden reads Float32 operands whole unless this is set: then as the chip's 19-bit source registers hold
    # them (TF32, the low 13 mantissa bits dropped; pybuda.golden.device.source_register).
    # PYBUDA_GOLDEN_TF32_OPERANDS=1 sets it.
    golden_tf32_operands: bool = False

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


# --- the environment (read here and nowhere else) ------------------------------------------------------------
def read_env() -> EnvSettings:
    """Read every environment variable pybuda honours (the one place that reads ``os.environ``).

    Read at each call, not cached: tests and scripts change the environment between runs.
    """
    return env_settings(os.environ)


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
