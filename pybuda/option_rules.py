"""The TT-Buda options pybuda cannot honour, or that TT-Buda itself ignored here: ONE table, and its checks.

:data:`OPTION_RULES` says, for every such option (a ``CompilerConfig`` field, a ``set_configuration_options``
keyword or an environment variable), whether a non-default value takes effect, is a ``ConfigError`` naming
it, or is logged once because TT-Buda ignored it too. :func:`apply_set_rule` runs the set-time rules when a
``CompilerConfig`` field is assigned; :func:`check_compile_options` the compile-time ones when a compile
snapshots the config. ``pybuda.config`` holds the config itself and calls these.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional

from pybuda.errors import ConfigError

# The messages are about config options: they stay on the config's logger, which users filter.
log = logging.getLogger("pybuda.config")

__all__ = ["OptionRule", "OPTION_RULES", "apply_set_rule", "check_compile_options", "log_once",
           "resolve_device_config", "write_backend_db"]


@dataclass(frozen=True)
class OptionRule:
    """What happens when a TT-Buda option is set to a value other than its default.

    - ``action``: ``"effect"`` (it takes effect; ``why`` says how), ``"error"`` (ConfigError naming the option
      and ``why``), ``"log"`` (accepted; logged once per process with ``why``, because TT-Buda itself ignored
      it in this situation: the simulated chip is TT-Buda's golden backend, not silicon);
    - ``when``: ``"set"`` (checked when the value is set: constructor, attribute, set_configuration_options,
      environment) or ``"compile"`` (checked when a compile starts, :meth:`CompilerConfig.snapshot`, because
      it depends on other options or on files);
    - ``fires``: whether a value triggers the rule (defaults never do).
    """

    action: str
    when: str
    why: str
    fires: Callable[[Any], bool] = bool


def _not(default: Any) -> Callable[[Any], bool]:
    return lambda value: value != default


#: option (CompilerConfig field, set_configuration_options keyword, or environment variable) → rule.
OPTION_RULES: Dict[str, OptionRule] = {
    "performance_trace": OptionRule(  # fires on anything but PerfTraceLevel.NONE (0)
        "log", "set", "the performance trace is a dump of TT-Buda's silicon backend; the simulated chip (like "
        "TT-Buda's golden backend) records none. Use the performance model instead: pybuda.perf.model.estimate, "
        "or `pybuda benchmark`, which writes perf_report.csv/.json/.html", _not(0)),
    "backend_opt_level": OptionRule(
        "log", "set", "the optimisation level of TT-Buda's silicon runtime (0-4); the golden backend ignored it, "
        "and so does the simulated chip", _not(4)),
    "backend_device_descriptor_path": OptionRule(
        "effect", "set", "the device_desc.yaml is read at compile (pybuda.compile.descriptor_from_file); the file "
        "must exist when set"),
    "backend_cluster_descriptor_path": OptionRule(
        "effect", "set", "the cluster_desc.yaml is read when set (it must exist and list its chips); a compile for "
        "more chips than it lists is a ConfigError"),
    "backend_runtime_params_path": OptionRule(
        "effect", "compile", "with store_backend_db_to_yaml the compile writes the backend database (device and "
        "options) there; without it TT-Buda's silicon runtime loaded its settings from the file, which the golden "
        "backend ignored, and so does the simulated chip (logged once)"),
    "backend_runtime_args": OptionRule(
        "log", "set", "command-line arguments of TT-Buda's silicon runtime; the golden backend ignored them, and so "
        "does the simulated chip"),
    "store_backend_db_to_yaml": OptionRule(
        "effect", "compile", "the compile writes the backend database (device descriptor and compile options) to "
        "backend_runtime_params_path, which must then be set"),
    "use_interactive_placer": OptionRule(
        "effect", "compile", "False: override_op_placement(spatial_epoch_break=True) starts a new epoch instead of "
        "a new chip (TT-Buda's non-interactive placer); placement is otherwise the same", _not(True)),
    "manual_t_streaming": OptionRule(
        "error", "set", "pybuda's balancer has no manual t-streaming mode (stream only the ops given "
        "override_t_stream_dir). Use enable_t_streaming=False, or override_t_stream_dir/override_t_stream_shape "
        "per op", _not(False)),
    "enable_device_tilize": OptionRule(
        "log", "set", "device tilize runs only on TT-Buda's embedded platform and was ignored elsewhere; the "
        "simulated chip tilizes on the host as TT-Buda did", _not(False)),
    "enable_forked_dram_inputs": OptionRule(
        "error", "set", "pybuda's netlist generator does not implement the forked-DRAM-input optimisation (one DRAM "
        "read feeding several consumers); leave it False", _not(False)),
    "enable_recompute": OptionRule(
        "effect", "set", "a training compile's backward recomputes the forward's activations from its inputs "
        "instead of reading them saved (less DRAM between the programs, more work in the backward)"),
    "device_config": OptionRule(
        "effect", "set", "selects a card preset: pybuda's presets and TT-Buda's names for the same cards; TT-Buda's "
        "gs_e300 and bh_test are cards pybuda has no descriptor for (ConfigError)"),
    "place_on_one_row": OptionRule(
        "log", "set", "TT-Buda's set_configuration_options accepted and ignored it", _not(False)),
    "use_interactive_placer_v2": OptionRule(
        "log", "set", "TT-Buda's set_configuration_options accepted and ignored it", _not(False)),
    "PYBUDA_AMP_LIGHT": OptionRule(
        "effect", "set", "a new CompilerConfig calls enable_amp_light(level); 1-3, anything else is a ConfigError"),
    "PYBUDA_N300_DATA_PARALLEL": OptionRule(
        "effect", "compile", "a TTDevice on an n300 (device_config='wh_n300', or Wormhole B0 with num_chips=2) "
        "compiles once for one chip and half the microbatch and runs each half on one chip "
        "(pybuda.runtime.data_parallel); another card is a ConfigError when the device compiles"),
}

#: TT-Buda's device_config names (reference §4.2: wh_n150, wh_n300, galaxy, gs_e150, gs_e300, bh_test). The first
#: four are pybuda presets of the same name (same card); these two are not:
_NO_DESCRIPTOR_CARDS: Dict[str, str] = {
    "gs_e300": "Grayskull e300 (a different harvesting and clock than e150)",
    "bh_test": "TT-Buda's Blackhole test configuration (not the p150 card)",
}

_logged_once: set = set()


def log_once(option: str, why: str) -> None:
    """Log ``option`` and ``why`` once per process (an accepted option that changes nothing here)."""
    if option not in _logged_once:
        _logged_once.add(option)
        log.warning("option '%s' accepted but has no effect: %s", option, why)


def apply_set_rule(name: str, value: Any) -> Any:
    """The set-time rule of ``name`` (OPTION_RULES) applied to ``value``: returns the value to store."""
    if name == "device_config":
        return resolve_device_config(value)
    if name == "backend_opt_level" and not 0 <= value <= 4:
        raise ConfigError(f"config option 'backend_opt_level' must be 0-4 (TT-Buda's levels), got {value!r}")
    rule = OPTION_RULES.get(name)
    if rule is None or rule.when != "set" or value is None or not rule.fires(value):
        return value
    if rule.action == "error":
        raise ConfigError(f"config option '{name}'={value!r} is not supported: {rule.why}")
    if rule.action == "log":
        log_once(name, rule.why)
    elif name == "backend_device_descriptor_path":
        if not os.path.isfile(value):
            raise ConfigError(f"config option 'backend_device_descriptor_path': no file '{value}'")
    elif name == "backend_cluster_descriptor_path":
        from pybuda.backend_build.descriptors import read_cluster_descriptor

        read_cluster_descriptor(value)
    return value


def resolve_device_config(value: Optional[str]) -> Optional[str]:
    """A ``device_config`` name as pybuda's preset name (TT-Buda's aliases mapped); ConfigError naming the
    accepted names otherwise."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigError(f"config option 'device_config' must be a string, got {value!r} ({type(value).__name__})")
    from pybuda.arch.descriptor import device_config_names

    names = device_config_names()
    key = value.lower()
    if key in names:
        return key
    if key in _NO_DESCRIPTOR_CARDS:
        raise ConfigError(f"device_config '{value}' is {_NO_DESCRIPTOR_CARDS[key]}, which pybuda has no device "
                          f"descriptor for; accepted: {names} (or backend_device_descriptor_path=<device_desc.yaml>)")
    raise ConfigError(f"unknown device_config '{value}'; expected one of {names}")


def check_compile_options(config: Any) -> Any:
    """The compile-time rules of :data:`OPTION_RULES`, applied to ``config`` (a snapshot, changed in place and
    returned): ConfigError for an unsupported combination, the options that take effect here applied."""
    from pybuda.backend_build.descriptors import read_cluster_descriptor

    if config.backend_cluster_descriptor_path:
        chips = len(read_cluster_descriptor(config.backend_cluster_descriptor_path)["chips"])
        if config.num_chips > chips:
            raise ConfigError(f"num_chips={config.num_chips}, but backend_cluster_descriptor_path "
                              f"'{config.backend_cluster_descriptor_path}' lists {chips} chip(s)")
    if not config.use_interactive_placer:
        for override in config.placer_op_overrides.values():
            if override.spatial_epoch_break:
                override.spatial_epoch_break, override.temporal_epoch_break = False, True
    if config.store_backend_db_to_yaml:
        if not config.backend_runtime_params_path:
            raise ConfigError("store_backend_db_to_yaml=True needs backend_runtime_params_path: TT-Buda dumps the "
                              "backend database to that file")
        write_backend_db(config, config.backend_runtime_params_path)
    elif config.backend_runtime_params_path:
        log_once("backend_runtime_params_path", OPTION_RULES["backend_runtime_params_path"].why)
    return config


def write_backend_db(config: Any, path: str) -> None:
    """Write the backend database (TT-Buda's runtime params YAML) of ``config`` to ``path``: the device
    descriptor when the config names one (device_config or backend_device_descriptor_path), and the compile
    options."""
    import yaml

    data: Dict[str, Any] = {"pybuda_backend_db": 1}
    desc = None
    if config.backend_device_descriptor_path:
        from pybuda.backend_build.descriptors import read_device_descriptor

        desc = read_device_descriptor(config.backend_device_descriptor_path)
    elif config.device_config:
        from pybuda.arch import get_device_descriptor

        desc = get_device_descriptor(device_config=config.device_config, harvesting_mask=config.harvesting_mask,
                                     num_chips=config.num_chips)
    if desc is not None:
        from pybuda.backend_build.descriptors import device_desc_dict

        data["device"] = device_desc_dict(desc)
    data["compiler_config"] = config.to_dict()
    try:
        parent = os.path.dirname(os.path.abspath(path))
        os.makedirs(parent, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            yaml.safe_dump(data, f, sort_keys=False, default_flow_style=None, width=120)
    except OSError as e:
        raise ConfigError(f"store_backend_db_to_yaml: cannot write backend_runtime_params_path '{path}': {e}") from None
