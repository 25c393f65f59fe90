"""The override APIs (TT-Buda's module-level functions): epoch and chip breaks, op sizes, t-streaming,
placement, DRAM queues, buffering nops, schedule constraints, fracture groups, mixed precision and CPU
fallback ops. Each checks its arguments (ConfigError) and records the override in the global
:class:`~pybuda.config.CompilerConfig`; :mod:`pybuda.config` re-exports them all.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Union

import pybuda.query as query
from pybuda.config_checks import _is_predicate, _names, config_enum
from pybuda.config_types import AMPNodeProperties, NopInsertion, PlacerOverride
from pybuda.dtypes import DataFormat, MathFidelity
from pybuda.errors import ConfigError
from pybuda.option_rules import log_once

if TYPE_CHECKING:
    from pybuda.config import CompilerConfig

log = logging.getLogger("pybuda.config")  # these APIs were pybuda.config's; their warnings keep its logger


def _config() -> "CompilerConfig":
    """The global config. :mod:`pybuda.config` owns it and imports this module, so it is looked up per call."""
    from pybuda.config import _get_global_compiler_config

    return _get_global_compiler_config()


def set_epoch_break(op_names: Union[str, "query.NodePredicateBuilder", List[Any]]) -> None:
    """Instruct place & route to start a new placement epoch on the given op(s): an op name, a
    ``pybuda.query`` predicate, or a list of them (the epoch starts at the first of them in schedule order).
    The op is kept out of fusion so that the break survives; an unknown name is a ConfigError at compile."""
    _config().place_on_new_epoch(op_names)


def set_chip_break(op_names: Union[str, "query.NodePredicateBuilder", List[Any]]) -> None:
    """Instruct place & route to start placing ops on the next chip in the pipeline (same forms as
    :func:`set_epoch_break`)."""
    _config().place_on_new_chip(op_names)


def override_op_size(op_name: str, grid_size: Tuple[int, int]) -> None:
    """Override automatic op sizing with given grid size (rows, columns)."""
    if len(grid_size) != 2 or not all(isinstance(v, int) and v > 0 for v in grid_size):
        raise ConfigError(f"override_op_size('{op_name}'): grid size must be two positive ints, got {grid_size!r}")
    _config().balancer_op_override(op_name, "grid_shape", tuple(grid_size))


def override_t_stream_dir(op_name: str, direction: Optional[str]) -> None:
    """Set the t-streaming direction of an op: 'r', 'c', 'rz', 'cz' or 'n'/None (no streaming)."""
    if direction not in ("r", "c", "rz", "cz", "n", None):
        raise ConfigError(f"override_t_stream_dir('{op_name}'): unknown direction {direction!r}")
    _config().balancer_op_override(op_name, "t_stream_dir", direction or "n")


def override_t_stream_shape(op_name: str, shape: Tuple[int, int]) -> None:
    """Set t-stream factors (r, c); one must be 1; (1, 1) disables streaming."""
    if len(shape) != 2 or min(shape) < 1 or (shape[0] > 1 and shape[1] > 1):
        raise ConfigError(f"override_t_stream_shape('{op_name}'): one factor of {shape!r} must be 1")
    _config().balancer_op_override(op_name, "t_stream_shape", tuple(shape))


def override_u_kt(op_name: str, u_kt: int) -> None:
    """Set a matmul's inner-dimension block (u_kt tiles)."""
    if not isinstance(u_kt, int) or u_kt < 1:
        raise ConfigError(f"override_u_kt('{op_name}'): u_kt must be a positive int, got {u_kt!r}")
    _config().balancer_op_override(op_name, "u_kt", u_kt)


def override_dram_parameters(op_name: str, force: bool) -> None:
    """Keep an op's parameters in DRAM (True) instead of prologue L1."""
    _config().balancer_op_override(op_name, "force_dram_parameters", bool(force))


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
    _config().placer_op_overrides[op_name] = PlacerOverride(
        tuple(start) if start else None, transpose_op, chip_id, spatial_epoch_break, temporal_epoch_break)


def override_dram_queue_placement(queue_name: str, *, chip_id: Optional[int] = None, channel: Optional[int] = None) -> None:
    """Pin a DRAM queue to a chip and channel."""
    _config().manual_dram_queue_placement[queue_name] = (chip_id, channel)


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
    _config().balancer_op_override(op_name, "input_buffer_multiplier", {operand_index: multiplier})


def internal_override_output_buffer_multiplier(op_name: str, *, multiplier: int) -> None:
    """Set an op's output buffering (``buf_size_mb``); TT-Buda's internal API (it could hang silicon)."""
    if not isinstance(multiplier, int) or isinstance(multiplier, bool) or multiplier < 1:
        raise ConfigError(f"internal_override_output_buffer_multiplier('{op_name}'): multiplier must be a positive "
                          f"int, got {multiplier!r}")
    log.warning("internal_override_output_buffer_multiplier is an internal API and may result in hangs on silicon")
    _config().balancer_op_override(op_name, "output_buffer_multiplier", multiplier)


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
    _config().buffering_nops_to_insert.append(
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
    _config().scheduler_constraints.append(list(partial_ordering))


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
    _config().fracture_groups.append((group, dict(chip_ids)))


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
    _config().tvm_module_to_num_patterns[module_name] = num_patterns
    log_once("set_num_repeated_patterns", REPEATED_PATTERNS_WHY)


def set_auto_transposing_placement(is_enabled: bool) -> None:
    """Enable or disable auto-transposing placement."""
    _config().enable_auto_transposing_placement = is_enabled


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
    _config().amp_properties.append(AMPNodeProperties(
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
    cfg = _config()
    for t in _names(op_types):
        if t not in cfg.cpu_fallback_ops:
            cfg.cpu_fallback_ops.append(t)


def remove_cpu_fallback_ops(op_types: Union[str, Sequence[str]]) -> None:
    """Remove op types from the CPU fallback list."""
    cfg = _config()
    cfg.cpu_fallback_ops = [t for t in cfg.cpu_fallback_ops if t not in _names(op_types)]
