"""The environment variables pybuda honours: the PYBUDA_* variables that mirror CompilerConfig fields
(:data:`ENV_CONFIG_FIELDS`), the runtime switches, and the record they are parsed into (:class:`EnvSettings`).

This module only parses a mapping it is given; :func:`pybuda.config.read_env` is the one reader of
``os.environ`` and the entry point for everything else (the names here are re-exported there).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from pybuda.config_types import CompileDepth
from pybuda.dtypes import DataFormat


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
    "PYBUDA_DISABLE_EXACT_DATA_MOVEMENT": ("exact_data_movement", _only_if_one(False)),
    "PYBUDA_EXP_APPROX": ("exp_approx", lambda raw: raw != "0"),  # TT-Buda: set at all means on
    "PYBUDA_DEFAULT_DF": ("default_df_override", DataFormat.from_json),
    "PYBUDA_AMP_LEVEL": ("amp_level", int),
    "PYBUDA_OVERRIDE_NUM_CHIPS": ("num_chips", int),
    "PYBUDA_DISABLE_STABLE_SOFTMAX": ("enable_stable_softmax", _only_if_one(False)),
    "PYBUDA_ENABLE_T_STREAMING": ("enable_t_streaming", lambda raw: raw == "1"),
    "PYBUDA_GOLDEN_FAST": ("golden_ignore_df_precision", _only_if_one(True)),
    "PYBUDA_GOLDEN_TF32_OPERANDS": ("golden_tf32_operands", _only_if_one(True)),
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
    #: ``PYBUDA_GOLDEN_KEEP_HEAP``: ``0`` leaves glibc's heap defaults alone (see pybuda.golden.heap).
    golden_keep_heap: bool = True
    #: Where built native kernels are kept: ``PYBUDA_CACHE_DIR``, else ``$XDG_CACHE_HOME/pybuda``, else
    #: ``~/.cache/pybuda``.
    cache_dir: str = ""


def _env_flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


def _env_flag_on_by_default(env: Mapping[str, str], name: str) -> bool:
    """A switch that is on unless set to 0, false, no or off."""
    return env.get(name, "1").strip().lower() not in ("0", "false", "no", "off")


def _env_set(env: Mapping[str, str], name: str) -> bool:
    # TT-Buda's verification flags: anything but unset, empty or "0" turns them on.
    return env.get(name, "0") not in ("", "0")


def env_settings(env: Mapping[str, str]) -> EnvSettings:
    """What the variables in ``env`` set: every one pybuda honours, parsed into :class:`EnvSettings`.
    :func:`pybuda.config.read_env` calls it with ``os.environ``; nothing else reads the environment."""
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
        golden_native=_env_flag_on_by_default(env, "PYBUDA_GOLDEN_NATIVE"),
        golden_keep_heap=_env_flag_on_by_default(env, "PYBUDA_GOLDEN_KEEP_HEAP"),
        cache_dir=env.get("PYBUDA_CACHE_DIR") or os.path.join(
            env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "pybuda"),
    )
