"""The device-op table (pybuda.netlist.device_ops) is complete, and every stage reads it.

Coverage: every row has its class, golden kernel (or an existing golden routine, or a stated reason for
having none), a cycle model with its coefficients on every arch, and every compiler flag; every registry
op's ``lower`` slot names an elementwise row; every op type the validator accepts has a row. The coverage
check is a function, and it is shown to report rows broken on purpose.

Then the extension op ``heaviside`` (a row plus the registry's ``lower`` slot) is checked at the netlist
level: the validator accepts it, YAML round-trips it, the golden device runs it, the cost model costs it.
"""

import copy
import dataclasses
import importlib
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from pybuda.dtypes import DataFormat as DF
from pybuda.dtypes import MathFidelity as MF
from pybuda.golden import formats
from pybuda.golden.device import GoldenDevice
from pybuda.netlist import check, parse_file, parse_yaml, to_yaml, validate
from pybuda.netlist import model as nl
from pybuda.netlist.device_ops import (
    ARCHS, CLASSES, DEVICE_OPS, FLAGS, CycleModel, NoGolden, coverage_problems, device_op, ops_of_class, ops_where,
)
from pybuda.ops import registry
from pybuda.perf.cost import kernel_cycles

#: netlist_backend_spec §3.1, the op types BBE's netlist parser creates kernels for (``drainer`` needs a
#: backend env flag and ``buffer`` has no kernel: the validator rejects both).
SPEC_OP_TYPES = frozenset("""
    matmul depthwise add subtract multiply maximum quantization dequantization requantization
    nop datacopy ethernet_datacopy
    exp log sqrt gelu gelu_derivative reciprocal sigmoid dropout tanh square power sine cosine lrelu abs
    reduce splice fused_op embedding tilizer topk
""".split())

SPEC = Path(__file__).parent / "fixtures" / "spec_example.yaml"


def golden_routine_exists(path: str) -> bool:
    """``kernels.matmul`` -> pybuda.golden.kernels has a callable ``matmul``."""
    module, *attrs = path.split(".")
    try:
        obj = importlib.import_module(f"pybuda.golden.{module}")
        for attr in attrs:
            obj = getattr(obj, attr)
    except (ImportError, AttributeError):
        return False
    return callable(obj)


def registry_lowerings():
    return {op.name: op.lower.op for op in registry.all_ops() if op.lower is not None}


def validator_accepts(op_type: str) -> bool:
    n = parse_file(SPEC)
    n.graphs["fwd0"].ops["out_nop"].type = op_type
    return not check(n, rules=["op_type_known"])


# ---------------------------------------------------------------------------------------------------
# Coverage
# ---------------------------------------------------------------------------------------------------

def test_every_row_is_complete():
    accepted = {t for t in SPEC_OP_TYPES | set(DEVICE_OPS) | {"drainer", "buffer", "conv2d"} if validator_accepts(t)}
    problems = coverage_problems(DEVICE_OPS, golden_routine_exists=golden_routine_exists,
                                 lowerings=registry_lowerings(), accepted_types=accepted)
    assert problems == []


def test_the_table_is_the_spec_list_plus_marked_extensions():
    spec_rows = {name for name, row in DEVICE_OPS.items() if not row.extension}
    assert spec_rows == SPEC_OP_TYPES
    assert ops_where("extension") == {"heaviside"}
    assert not validator_accepts("drainer") and not validator_accepts("buffer")
    assert all(validator_accepts(t) for t in DEVICE_OPS)


def test_the_table_sits_below_the_stages_that_read_it():
    import pybuda
    from tests.import_graph import import_graph

    graph = import_graph(str(Path(pybuda.__file__).parent))
    # torch, the standard library and the SFPU's approximations (which import nothing of pybuda themselves)
    assert graph["pybuda.netlist.device_ops"] <= {"pybuda.netlist.sfpu_approx"}
    assert graph["pybuda.netlist.sfpu_approx"] == set()
    readers = {mod for mod, deps in graph.items() if "pybuda.netlist.device_ops" in deps}
    assert {"pybuda.netlist.model", "pybuda.golden.kernels", "pybuda.perf.cost", "pybuda.passes.lower.common",
            "pybuda.passes.lowered.fuse_ops", "pybuda.balancer.legalizer"} <= readers


def test_model_sets_and_op_class_are_derived_from_the_table():
    assert nl.OP_TYPES == frozenset(DEVICE_OPS)
    assert nl.BINARY_OPS == ops_of_class("binary") and nl.SFPU_OPS == ops_of_class("sfpu")
    assert nl.NON_TENSIX_OPS == {"ethernet_datacopy"}
    for name, row in DEVICE_OPS.items():
        assert nl.op_class(name) == ("unary" if row.cls in ("copy", "sfpu") else row.cls)
        assert row.is_sfpu == (row.cls == "sfpu")
    assert nl.op_class("not_an_op") == "other"


def test_every_registry_lowering_is_an_elementwise_row():
    lowerings = registry_lowerings()
    assert lowerings["relu"] == "nop" and lowerings["leaky_relu"] == "lrelu" and lowerings["pow"] == "power"
    assert lowerings["heaviside"] == "heaviside"
    assert all(DEVICE_OPS[target].is_eltwise for target in lowerings.values())


def _broken(name="exp", **changes):
    return dataclasses.replace(device_op(name), **changes)


def test_coverage_reports_rows_broken_on_purpose():
    exp = device_op("exp")
    no_blackhole = {k: v for k, v in exp.cycles.items() if k != "blackhole"}
    cases = {
        "no cycle model for blackhole": _broken(cycles=no_blackhole),
        "fields not set: cycles": _broken(cycles=None),
        "fields not set: golden": _broken(golden=None),
        "fields not set: fusible": _broken(fusible=None),
        "unknown class": _broken(cls="vector"),
        "needs coefficients ['tile']": _broken(cycles={**exp.cycles, "grayskull": CycleModel(
            "unary", {"ublock": 1.0}, "test")}),
        "unknown cycle formula": _broken(cycles={**exp.cycles, "wormhole_b0": CycleModel("linear", {}, "test")}),
        "must be a float kernel": _broken(golden="kernels.exp"),
        "NoGolden without a reason": _broken(golden=NoGolden("")),
        "does not exist in pybuda.golden": _broken("reduce", golden="kernels.no_such_routine"),
        "must name a golden routine": _broken("splice", golden=lambda x, a: x),
    }
    for expected, row in cases.items():
        problems = coverage_problems([row], golden_routine_exists=golden_routine_exists)
        assert any(expected in p for p in problems), (expected, problems)
    # the whole table with one broken row fails; the intact table passes
    table = {**DEVICE_OPS, "exp": cases["no cycle model for blackhole"]}
    assert coverage_problems(table) == ["device op 'exp': no cycle model for blackhole"]
    assert coverage_problems(DEVICE_OPS) == []
    # lowerings to missing or structural rows, and accepted types without a row
    problems = coverage_problems(DEVICE_OPS, lowerings={"gelu": "gelu", "foo": "no_such_op", "mm": "matmul"},
                                 accepted_types={"exp", "drainer"})
    assert problems == [
        "registry op 'foo' lowers to 'no_such_op', which has no device-op row",
        "registry op 'mm' lowers to 'matmul' of class matmul; the lower slot names elementwise ops "
        "(binary, copy, sfpu)",
        "op type 'drainer' is accepted by the validator but has no device-op row",
    ]


def test_classes_flags_and_archs_are_the_documented_ones():
    assert {row.cls for row in DEVICE_OPS.values()} == set(CLASSES)
    assert ARCHS == ("grayskull", "wormhole_b0", "blackhole")
    for row in DEVICE_OPS.values():
        assert all(isinstance(getattr(row, flag), bool) for flag in FLAGS)
        if not row.is_eltwise:
            assert not (row.fusible or row.zero_preserving or row.commutative)


def test_unary_golden_kernels_are_the_table_kernels():
    from pybuda.golden import kernels

    assert set(kernels.UNARY) == ops_of_class("copy", "sfpu")
    x = torch.linspace(-3, 3, 64).reshape(1, 1, 8, 8)
    assert torch.equal(kernels.UNARY["lrelu"](x, {"slope": 0.5}), torch.where(x >= 0, x, 0.5 * x))
    assert torch.equal(kernels.binary("subtract", x, x.flip(-1), None), x - x.flip(-1))


# ---------------------------------------------------------------------------------------------------
# heaviside, an extension op type, at the netlist level
# ---------------------------------------------------------------------------------------------------

HEAVISIDE = """
devices: {arch: wormhole_b0}
queues:
  a:   {input: HOST, type: queue, entries: 2, grid_size: [1,1], t: 1, mblock: [2,2], ublock: [1,1],
        ublock_order: r, df: Float16_b, target_device: 0, loc: dram, dram: [[0, 0x30000000]]}
  b:   {input: HOST, type: queue, entries: 2, grid_size: [1,1], t: 1, mblock: [2,2], ublock: [1,1],
        ublock_order: r, df: Float16_b, target_device: 0, loc: dram, dram: [[1, 0x30000000]]}
  out: {input: hv, type: queue, entries: 2, grid_size: [1,1], t: 1, mblock: [2,2], ublock: [1,1],
        ublock_order: r, df: Float16_b, target_device: 0, loc: host, host: [[0, 0x0]]}
graphs:
  fwd0:
    target_device: 0
    input_count: 2
    hv: {type: heaviside, grid_loc: [0,0], grid_size: [1,1], inputs: [a, b], in_df: [Float16_b, Float16_b],
         out_df: Float16_b, intermed_df: Float16_b, acc_df: Float16_b, math_fidelity: HiFi2, t: 1,
         mblock: [2,2], ublock: [1,1], ublock_order: r, buf_size_mb: 2, untilize_output: true}
programs:
  - run_fwd:
    - var: {$c_zero: 0}
    - execute: {graph_name: fwd0, queue_settings: {
        a: {prologue: false, epilogue: false, zero: false, rd_ptr_local: $c_zero, rd_ptr_global: $c_zero},
        b: {prologue: false, epilogue: false, zero: false, rd_ptr_local: $c_zero, rd_ptr_global: $c_zero}}}
"""


def test_heaviside_row():
    row = device_op("heaviside")
    assert row.cls == "binary" and row.extension and row.fusible and row.zero_preserving
    assert not row.commutative and not row.zero_absorbing
    maximum = device_op("maximum")
    for arch in ARCHS:
        assert dict(row.cycles[arch].coefficients) == dict(maximum.cycles[arch].coefficients)


def test_heaviside_netlist_validates_round_trips_and_runs_on_the_golden_device():
    netlist = parse_yaml(HEAVISIDE)
    validate(netlist)
    assert parse_yaml(to_yaml(netlist)) == netlist
    bad = copy.deepcopy(netlist)
    bad.graphs["fwd0"].ops["hv"].type = "heavyside"
    assert [e.rule for e in check(bad)] == ["op_type_known"]

    g = torch.Generator().manual_seed(0)
    a = torch.randn(2, 1, 64, 64, generator=g)
    a[:, :, ::3] = 0.0  # every third row takes b
    b = torch.randn(2, 1, 64, 64, generator=g)
    device = GoldenDevice(netlist, fast=False)
    device.push("a", a)
    device.push("b", b)
    device.run_program("run_fwd", {})
    out = device.pop("out", 2)
    # The queues store Float16_b; heaviside picks 0, 1 or b's stored value, so the result is exact.
    qa, qb = formats.quantize(a, DF.Float16_b), formats.quantize(b, DF.Float16_b)
    assert torch.equal(out, torch.heaviside(qa, qb))
    assert (out == qb).any() and (out == 1).any() and (out == 0).any()


def test_heaviside_costs_like_maximum():
    def op(op_type):
        return SimpleNamespace(type=op_type, attrs={}, in_df=[DF.Float16_b, DF.Float32], out_df=DF.Float16_b,
                               acc_df=DF.Float16_b, math_fidelity=MF.HiFi2, inputs=["a", "b"], intermed_df=DF.Float16_b)

    model = SimpleNamespace(t=2, mblock=(2, 3), ublock=(2, 2), m_k=1, u_kt=1, grid_shape=(1, 1))
    for arch in ARCHS:
        cycles = kernel_cycles(op("heaviside"), model, arch)
        assert cycles == kernel_cycles(op("maximum"), model, arch) > 0
        assert cycles < kernel_cycles(op("add"), model, arch) * 10


@pytest.mark.parametrize("op_type", sorted(DEVICE_OPS))
def test_every_row_has_a_positive_cost_on_every_arch(op_type):
    attrs = {"identity": True, "indices_len": 4} if op_type in ("matmul", "depthwise") else {}
    op = SimpleNamespace(type=op_type, attrs=attrs, in_df=[DF.Float16_b, DF.Float16_b], out_df=DF.Float16_b,
                         acc_df=DF.Float16_b, math_fidelity=MF.HiFi2, inputs=["a", "b"], intermed_df=DF.Float16_b,
                         tags={})
    model = SimpleNamespace(t=1, mblock=(1, 1), ublock=(1, 1), m_k=1, u_kt=1, grid_shape=(1, 1))
    for arch in ARCHS:
        assert kernel_cycles(op, model, arch) > 0
