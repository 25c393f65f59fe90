"""Verification: CPU execution of an ir.Graph, PCC and tolerance checks, and VerifyConfig.

The comparison rule follows TT-Buda (`reference/ttbuda_spec.md` §6): a tensor passes when it is
``allclose`` to the golden (rtol 0, atol = relative_atol x max|golden|) or its PCC reaches the required
value. One fix: TT-Buda masked NaN/inf to 0 before the PCC, so scattered NaNs could pass. Here a
tensor whose non-finite positions differ from the golden's fails outright.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Set

import torch

from pybuda.config import read_env
from pybuda.errors import ConfigError, InputError
from pybuda.ir.graph import CONSTANT, INPUT, OP, OUTPUT, PARAMETER, Graph
from pybuda.ops import registry

log = logging.getLogger(__name__)


def _default_arch() -> Any:
    from pybuda.arch.types import BackendDevice

    env = read_env().runtime
    return (BackendDevice.Wormhole_B0 if env.golden_wormhole_b0 else
            BackendDevice.Blackhole if env.golden_blackhole else BackendDevice.Grayskull)


def _default_devtype() -> Any:
    from pybuda.arch.types import BackendType

    return BackendType.Golden


def _default_devmode() -> Any:
    from pybuda.config import DeviceMode

    return DeviceMode.CompileAndRun


def _default_fp32_fallback() -> Any:
    from pybuda.dtypes import DataFormat

    return DataFormat.Float16_b


#: VerifyConfig fields of TT-Buda's that pybuda accepts but that change nothing here, and why. Setting one to a
#: value other than its default logs the reason once per process (VerifyConfig.__post_init__).
NO_EFFECT_FIELDS: Dict[str, str] = {
    "run_net2pipe": "net2pipe is TT-Buda's silicon backend compiler; the simulated chip needs no pipes compiled "
                    "(pybuda.backend_build builds them for the performance model regardless)",
    "chip_ids": "verify_module's device placement; pybuda's checks run the compiled graph on one simulated chip",
    "num_chips": "verify_module's device placement; pybuda's checks run the compiled graph on one simulated chip",
    "verify_tvm_compile": "pybuda has no TVM step: PyTorch is captured straight into the graph",
    "verify_pipeline_result_vs_framework": "pybuda has no verify_module harness; the compiled outputs are compared "
                                           "with the framework's when `enabled` is set",
    "verify_pybuda_codegen_vs_framework": "pybuda generates no PyBuda Python module from the framework (no TVM "
                                          "codegen), so there is nothing to compare",
    "waive_gradient_errors": "gradient checks belong to training, which pybuda does not support yet",
    "override_module_outptus": "verify_module's golden outputs; pybuda has no verify_module harness",
    "devtype": "the device type of verify_module's devices; every TTDevice runs on the simulated (golden) chip",
    "devmode": "the device mode of verify_module's devices; pybuda has no verify_module harness",
    "arch": "the arch of verify_module's devices; pybuda has no verify_module harness (TTDevice(arch=...) sets it)",
    "optimizer": "training, which pybuda does not support yet",
    "scheduler": "training, which pybuda does not support yet",
    "epoch_breaks": "verify_module's epoch breaks; use pybuda.set_epoch_break",
    "fp32_fallback": "verify_module's TTDevice setting; use TTDevice(fp32_fallback=...)",
    "skip_shutdown": "verify_module's shutdown; pybuda has no verify_module harness",
}

_verify_logged: Set[str] = set()


class TestKind(enum.Enum):
    INFERENCE = "inference"
    TRAINING = "training"
    TRAINING_RECOMPUTE = "training_recompute"


@dataclass
class VerifyConfig:
    """What to verify and with which tolerances (TT-Buda's fields and defaults)."""

    graph_name: str = "graph"
    enabled: bool = True
    intermediates: bool = True
    rtol: Dict[torch.dtype, float] = field(default_factory=dict)
    atol: Dict[torch.dtype, float] = field(default_factory=dict)
    relative_atol: float = 0.1
    pcc: Optional[float] = None
    dump_tensors_path: str = ""
    #: Run the netlist on the golden backend at BACKEND_GOLDEN_VERIFY (env ``PYBUDA_VERIFY_GOLDEN=1``).
    run_golden: bool = field(default_factory=lambda: read_env().verify_golden)
    #: True (TT-Buda's default): that golden run is plain float32; False (or env
    #: ``TT_BACKEND_GOLDEN_QUANTIZE=1``): it applies the chip's formats and math fidelity.
    golden_ignore_df_precision: bool = field(default_factory=lambda: not read_env().golden_quantize)
    golden_compare_callback: Optional[Callable[[torch.Tensor, torch.Tensor], bool]] = None
    verify_all: bool = False
    verify_last: bool = True
    verify_each_buda_pass: bool = False
    verify_post_autograd_passes: bool = False
    verify_post_placer: bool = False
    sequential: bool = True
    test_kind: TestKind = TestKind.INFERENCE
    scale_loss: float = 50.0
    epochs: int = 1
    steps: int = 1
    accumulation_steps: int = 1
    microbatch_count: int = 1
    checkpoint_interval: int = 1
    tti_path: Optional[str] = None
    enable_input_gradient_checking: bool = True
    enable_parameter_gradient_checking: bool = True
    # TT-Buda's remaining fields (reference §6), with its defaults; see NO_EFFECT_FIELDS.
    run_net2pipe: bool = False
    chip_ids: Optional[List[int]] = None
    num_chips: Optional[int] = None
    verify_tvm_compile: bool = False
    verify_pipeline_result_vs_framework: bool = False
    verify_pybuda_codegen_vs_framework: bool = False
    waive_gradient_errors: Set[str] = field(default_factory=set)
    override_module_outptus: Optional[Any] = None
    devtype: Any = field(default_factory=_default_devtype)
    devmode: Any = field(default_factory=_default_devmode)
    arch: Any = field(default_factory=_default_arch)
    optimizer: Optional[Dict[str, Any]] = field(
        default_factory=lambda: {"type": "sgd", "params": {"learning_rate": 50.0}})
    scheduler: Optional[Dict[str, Any]] = None
    epoch_breaks: List[str] = field(default_factory=list)
    fp32_fallback: Any = field(default_factory=_default_fp32_fallback)
    skip_shutdown: bool = False

    def __post_init__(self) -> None:
        from pybuda.arch.types import BackendDevice, BackendType
        from pybuda.config import DeviceMode

        for name, kind in (("devtype", BackendType), ("arch", BackendDevice), ("devmode", DeviceMode)):
            if not isinstance(getattr(self, name), kind):
                raise ConfigError(f"VerifyConfig.{name} must be a pybuda.{kind.__name__}, got {getattr(self, name)!r}")
        for f_ in self.__dataclass_fields__.values():
            if f_.name in NO_EFFECT_FIELDS and f_.name not in _verify_logged:
                default = f_.default_factory() if f_.default_factory is not dataclasses.MISSING else f_.default
                if getattr(self, f_.name) != default:
                    _verify_logged.add(f_.name)
                    log.warning("VerifyConfig.%s accepted but has no effect: %s", f_.name, NO_EFFECT_FIELDS[f_.name])

        if self.pcc is None:
            self.pcc = 0.99
        if isinstance(self.rtol, (int, float)):
            self.rtol = {dt: float(self.rtol) for dt in (torch.float32, torch.float16, torch.bfloat16)}
        if isinstance(self.atol, (int, float)):
            self.atol = {dt: float(self.atol) for dt in (torch.float32, torch.float16, torch.bfloat16)}

    @classmethod
    def disabled(cls) -> "VerifyConfig":
        """Verification off (as TT-Buda's ``VerifyConfig.disabled()``)."""
        return cls(enabled=False, verify_last=False, intermediates=False, run_golden=False, scale_loss=1.0)

    def total_number_of_inputs(self) -> int:
        return self.epochs * self.steps * self.accumulation_steps * self.microbatch_count


def verification_requested(verify_cfg: Optional["VerifyConfig"]) -> bool:
    """Whether ``verify_cfg`` asks for anything to be compared with the model's outputs: the compiled
    outputs (``enabled``), every graph stage (``verify_all``) or the netlist on the golden backend
    (``run_golden``). Only then is the model run on the CPU reference for its sample outputs, which for
    a large model takes about as long as the compile itself."""
    if verify_cfg is None:
        return False
    return bool(getattr(verify_cfg, "enabled", False) or getattr(verify_cfg, "verify_all", False)
                or getattr(verify_cfg, "run_golden", False))


def calculate_pcc(a: torch.Tensor, b: torch.Tensor) -> float:
    """Pearson correlation of two tensors, with TT-Buda's edge cases and a NaN-placement check.

    - both entirely NaN: 1.0; exactly one entirely NaN: 0.0;
    - NaN/inf at different positions (or with different infinities): 0.0;
    - one all-zero and the other not: 0.0; exactly equal: 1.0;
    - otherwise the correlation over the finite elements.
    """
    a = a.detach().to(torch.float64).flatten()
    b = b.detach().to(torch.float64).flatten()
    if a.shape != b.shape:
        raise InputError(f"calculate_pcc: shapes differ {list(a.shape)} vs {list(b.shape)}")
    a_nan, b_nan = torch.isnan(a), torch.isnan(b)
    if a_nan.all() and b_nan.all():
        return 1.0
    if a_nan.all() or b_nan.all():
        return 0.0
    a_fin, b_fin = torch.isfinite(a), torch.isfinite(b)
    if not torch.equal(a_fin, b_fin) or not torch.equal(a_nan, b_nan):
        return 0.0
    if not torch.equal(a[~a_fin & ~a_nan], b[~b_fin & ~b_nan]):  # +inf vs -inf
        return 0.0
    a, b = a[a_fin], b[b_fin]
    if a.numel() == 0 or torch.equal(a, b):
        return 1.0
    a_zero, b_zero = not a.any(), not b.any()
    if a_zero != b_zero:
        return 0.0
    a_c, b_c = a - a.mean(), b - b.mean()
    denom = torch.sqrt((a_c * a_c).sum() * (b_c * b_c).sum())
    if denom == 0:
        # One side is constant: correlated only if both are the same constant.
        return 1.0 if torch.allclose(a, b) else 0.0
    return float((a_c * b_c).sum() / denom)


def _squeeze_to_rank(t: torch.Tensor, rank: int) -> torch.Tensor:
    while t.dim() > rank and t.shape[0] == 1:
        t = t.squeeze(0)
    return t


def compare_tensor_to_golden(name: str, golden: torch.Tensor, calculated: torch.Tensor,
                             rtol: Optional[float] = None, atol: Optional[float] = None,
                             pcc: Optional[float] = None, warning_only: bool = False,
                             relative_atol: Optional[float] = None,
                             verify_cfg: Optional[VerifyConfig] = None) -> bool:
    """True when ``calculated`` matches ``golden`` by allclose or by PCC (see module doc)."""
    cfg = verify_cfg or VerifyConfig()
    golden = golden.detach()
    calculated = calculated.detach()
    if golden.dtype == torch.bool or calculated.dtype == torch.bool:
        ok = golden.shape == calculated.shape and torch.equal(golden, calculated.to(torch.bool))
        return _report(name, ok, "bool tensors differ", warning_only)
    rank = golden.dim()
    calculated = _squeeze_to_rank(calculated, rank)
    golden = _squeeze_to_rank(golden, calculated.dim())
    if golden.shape != calculated.shape:
        return _report(name, False, f"shape mismatch: golden {list(golden.shape)} vs calculated {list(calculated.shape)}",
                       warning_only)
    calculated = calculated.to(golden.dtype) if golden.is_floating_point() else calculated.to(torch.float32)
    golden_f = golden.to(torch.float32)
    calc_f = calculated.to(torch.float32)
    if rtol is None:
        rtol = cfg.rtol.get(golden.dtype, 0.0)
    if atol is None:
        atol = cfg.atol.get(golden.dtype)
    if atol is None:
        finite = golden_f[torch.isfinite(golden_f)]
        max_abs = float(finite.abs().max()) if finite.numel() else 0.0
        atol = (relative_atol if relative_atol is not None else cfg.relative_atol) * max_abs
    required_pcc = pcc if pcc is not None else cfg.pcc
    same_nonfinite = torch.equal(torch.isnan(golden_f), torch.isnan(calc_f)) and \
        torch.equal(torch.isinf(golden_f), torch.isinf(calc_f))
    close = same_nonfinite and torch.allclose(golden_f, calc_f, rtol=rtol, atol=atol, equal_nan=True)
    if close and cfg.golden_compare_callback is not None:
        close = bool(cfg.golden_compare_callback(golden, calculated))
    if close:
        return True
    if golden.numel() <= 1:
        return _report(name, False, f"single value differs: golden {golden_f.flatten()[:1].tolist()} vs "
                                    f"{calc_f.flatten()[:1].tolist()}", warning_only)
    got = calculate_pcc(golden_f, calc_f)
    if got >= required_pcc:
        return True
    diff = (golden_f - calc_f).abs()
    diff = diff[torch.isfinite(diff)]
    max_atol = float(diff.max()) if diff.numel() else float("nan")
    return _report(name, False, f"PCC {got:.6f} < required {required_pcc} (max abs diff {max_atol:.4g}, atol {atol:.4g})",
                   warning_only)


def _report(name: str, ok: bool, reason: str, warning_only: bool) -> bool:
    if not ok:
        (log.warning if warning_only else log.error)("Tensor mismatch on %s: %s", name, reason)
    return ok


def run_graph_on_cpu(graph: Graph, inputs: Sequence[torch.Tensor],
                     parameters: Optional[Mapping[str, torch.Tensor]] = None,
                     return_intermediates: bool = False):
    """Execute ``graph`` with the registry's torch references.

    ``inputs`` follow the order of ``graph.inputs``; ``parameters`` override stored parameter values.
    Returns the list of outputs, plus a dict of every node's value if ``return_intermediates``.
    """
    graph_inputs = graph.inputs
    if len(inputs) != len(graph_inputs):
        raise InputError(f"graph '{graph.name}' takes {len(graph_inputs)} input(s) "
                         f"{[n.name for n in graph_inputs]}, got {len(inputs)}")
    values: Dict[str, torch.Tensor] = {}
    for node, value in zip(graph_inputs, inputs):
        if not isinstance(value, torch.Tensor):
            raise InputError(f"input '{node.name}' must be a torch.Tensor, got {type(value).__name__}")
        if tuple(value.shape) != tuple(node.shape):
            raise InputError(f"input '{node.name}' expects shape {list(node.shape)}, got {list(value.shape)}")
        values[node.name] = value
    params = parameters or {}
    users_left = {name: len(users) for name, users in graph.user_map().items()}
    outputs: List[torch.Tensor] = []
    with torch.no_grad():
        for node in graph:
            if node.kind in (PARAMETER, CONSTANT):
                values[node.name] = params.get(node.name, graph.tensors.get(node.name))
                if values[node.name] is None:
                    raise InputError(f"graph '{graph.name}': no value for {node.kind} '{node.name}'")
            elif node.kind == OP:
                values[node.name] = registry.evaluate(node.op_type, [values[o] for o in node.operands], node.attrs)
            elif node.kind == OUTPUT:
                outputs.append(values[node.operands[0]])
            if not return_intermediates:
                # Free values nobody needs any more: keeps memory flat on large models.
                for operand in set(node.operands):  # user_map counts a user once, however many uses
                    users_left[operand] -= 1
                    if users_left[operand] == 0 and graph[operand].kind != INPUT:
                        values.pop(operand, None)
    return (outputs, values) if return_intermediates else outputs
