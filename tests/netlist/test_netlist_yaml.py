"""Netlist YAML: the spec example and a feature-rich netlist parse, validate, emit and re-parse to equal
Netlists; emitted text is snapshot-tested; the parser is strict about keys, types and required fields.

Snapshots (fixtures/*.golden.yaml) are regenerated on purpose only:
    .venv/bin/python -c "from pybuda.netlist import parse_file, to_yaml; \
        open('tests/netlist/fixtures/spec_example.golden.yaml','w').write(
            to_yaml(parse_file('tests/netlist/fixtures/spec_example.yaml')))"
(and the same for rich.yaml with arch='wormhole_b0').
"""

from pathlib import Path

import pytest

from pybuda.arch import get_device_descriptor
from pybuda.errors import NetlistError
from pybuda.netlist import (
    AllocateQueue, Broadcast, EndLoop, Execute, HSlice, HStack, Loop, NetlistOp, Pad, Param,
    QueueSetting, StaticVar, TileBroadcast, TileShape3, TMError, Transpose, Var, VarInst, VSlice, VStack, apply_tms,
    parse_file, parse_yaml, resolve_operand, to_yaml, validate, write,
)
from pybuda.netlist.operands import op_l1_usage
from pybuda.dtypes import DataFormat, MathFidelity

FIXTURES = Path(__file__).parent / "fixtures"
SPEC = FIXTURES / "spec_example.yaml"
RICH = FIXTURES / "rich.yaml"


def spec_text() -> str:
    return SPEC.read_text()


# ---------------------------------------------------------------------------------------------------
# The spec's §1.7 example
# ---------------------------------------------------------------------------------------------------

def test_spec_example_parses_and_validates():
    n = parse_file(SPEC)
    assert n.arch == "wormhole_b0"
    assert list(n.queues) == ["act", "w", "bias", "out"]
    assert list(n.graphs["fwd0"].ops) == ["mm0", "out_nop"]
    validate(n)
    validate(n, get_device_descriptor(device_config="wh_n150"))
    validate(n, get_device_descriptor("wormhole_b0"))


def test_spec_example_shapes_match_the_spec():
    n = parse_file(SPEC)
    assert n.queues["act"].shape == TileShape3(1, 2, 4)      # 64x128
    assert n.queues["w"].shape == TileShape3(1, 4, 8)
    mm0 = n.graphs["fwd0"].ops["mm0"]
    assert mm0.shape == TileShape3(1, 2, 8)
    assert mm0.m_k * mm0.u_kt == 4
    assert apply_tms(n.queues["bias"].shape, mm0.tms_of(2)) == mm0.shape
    assert n.graphs["fwd0"].ops["out_nop"].shape == TileShape3(1, 2, 8)
    assert mm0.tms_of(2) == (Broadcast("r", 2),)
    assert mm0.attributes == {"m_k": 2, "u_kt": 2, "bias": True, "sfpu_op": "gelu"}
    assert mm0.in_df == (DataFormat.Float16_b, DataFormat.Bfp8_b, DataFormat.Float16_b)
    assert mm0.math_fidelity == MathFidelity.HiFi2


def test_spec_example_programs():
    prog = parse_file(SPEC).program("run_fwd")
    kinds = [type(i) for i in prog.instructions]
    assert kinds == [Param, Var, StaticVar, Loop, Execute, VarInst, VarInst, EndLoop]
    execute = prog.instructions[4]
    assert execute.graph_name == "fwd0"
    assert execute.queue_settings["act"] == QueueSetting(prologue=False, epilogue=False, zero=False,
                                                         rd_ptr_local="$lptr", rd_ptr_global="$gptr")
    assert execute.queue_settings["w"].autoincs("ram") == (0, 0, 0)
    assert execute.queue_settings["act"].autoincs("queue") == (1, 0, 1)
    assert prog.instructions[5] == VarInst(out="$lptr", op="incwrap", args=("$c_mb", 16))
    assert resolve_operand("$c_mb", {"$c_mb": 4}) == 4 and resolve_operand("true", {}) == 1


@pytest.mark.parametrize("path, arch", [(SPEC, None), (RICH, "wormhole_b0")])
def test_round_trip_is_exact(path, arch, tmp_path):
    n = parse_file(path, arch=arch)
    text = to_yaml(n)
    again = parse_yaml(text, arch=arch)
    assert again == n
    assert to_yaml(again) == text
    out = tmp_path / "netlist.yaml"
    write(n, out)
    assert parse_file(out, arch=arch) == n


@pytest.mark.parametrize("name, arch", [("spec_example", None), ("rich", "wormhole_b0")])
def test_snapshot(name, arch):
    n = parse_file(FIXTURES / f"{name}.yaml", arch=arch)
    assert to_yaml(n) == (FIXTURES / f"{name}.golden.yaml").read_text()


def test_emitted_style():
    text = to_yaml(parse_file(SPEC))
    assert "dram: [[1, 0x30000000], [2, 0x30000000]]" in text
    assert "host: [[0, 0x0]]" in text
    assert "grid_size: [1, 2]" in text
    assert text.index("devices:") < text.index("queues:") < text.index("graphs:") < text.index("programs:")
    # one queue / op per line
    assert sum(line.lstrip().startswith("mm0:") for line in text.splitlines()) == 1


def test_rich_netlist_features():
    n = parse_file(RICH, arch="wormhole_b0")
    validate(n, get_device_descriptor(device_config="wh_n150"))
    assert n.devices_arch == ("grayskull", "wormhole_b0") and n.arch == "wormhole_b0"
    assert n.queues["res"].host == ((0, 0),)  # bare host address means channel 0
    assert n.queues["in0"].read_ports == (1,)
    ew = n.graphs["g0"].ops["ew"]
    assert ew.tms_of(1) == (Broadcast("c", 4), Broadcast("z", 2))
    assert ew.input_pad[0].ct == 1 and ew.input_unpad[0].ct == 1 and ew.grid_transpose
    assert ew.attributes["relu_threshold"] == 1.5
    fused = n.fused_ops[0]
    assert [s.name for s in fused.schedules[0]] == ["e0", "g0s"]
    assert fused.schedules[0][1].pop == ("intermed0",)
    prog = n.program("prog")
    assert prog.instructions[1] == Var(values={"$c_zero": 0}, as_list=True)
    assert isinstance(prog.instructions[4], AllocateQueue)
    assert n.program("empty").instructions == []
    assert n.graph_io("g1") == (["e2e"], ["res"])


def test_python_built_netlist_equals_parsed():
    # lists are normalised to tuples, so a Python-built netlist compares equal to its YAML
    n = parse_file(SPEC)
    op = n.graphs["fwd0"].ops["out_nop"]
    rebuilt = NetlistOp(name="out_nop", type="nop", grid_loc=[1, 0], grid_size=[1, 1], inputs=["mm0"],
                        in_df=["Float16_b"], out_df="Float16_b", intermed_df=DataFormat.Float16_b,
                        acc_df=DataFormat.Float16_b, math_fidelity="HiFi2", t=1, mblock=[2, 4], ublock=[1, 2],
                        buf_size_mb=2, untilize_output=True)
    assert rebuilt == op


def test_floats_and_odd_names_survive_emission():
    n = parse_file(SPEC)
    n.graphs["fwd0"].ops["mm0"].attributes.update(relu_en=True, relu_threshold=1e-05, relu_mode="min")
    q = n.queues.pop("out")
    q.name = "out queue:1"
    q.input = "out_nop"
    n.queues[q.name] = q
    again = parse_yaml(to_yaml(n))
    assert again.graphs["fwd0"].ops["mm0"].attributes["relu_threshold"] == 1e-05
    assert "out queue:1" in again.queues


def test_forked_dram_inputs_and_tile_dim_round_trip():
    n = parse_file(SPEC)
    n.graphs["fwd0"].ops["mm0"].forked_dram_inputs = (("act", "out_nop"),)
    n.queues["act"].tile_dim = (32, 32)
    assert parse_yaml(to_yaml(n)) == n


# ---------------------------------------------------------------------------------------------------
# TMs
# ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("tm, before, after", [
    (Broadcast("r", 3), (1, 2, 4), (1, 6, 4)),
    (Broadcast("c", 2), (1, 2, 4), (1, 2, 8)),
    (Broadcast("z", 5), (1, 2, 4), (5, 2, 4)),
    (HSlice(2), (1, 2, 4), (2, 2, 2)),
    (VSlice(2), (1, 2, 4), (2, 1, 4)),
    (HStack(2), (4, 2, 4), (2, 2, 8)),
    (VStack(4), (4, 2, 4), (1, 8, 4)),
    (Transpose(), (3, 2, 4), (3, 4, 2)),
    (TileBroadcast("r"), (1, 2, 4), (1, 2, 4)),
    (Pad(1, 2, 0.0), (1, 2, 4), (1, 3, 6)),
])
def test_tm_shapes(tm, before, after):
    assert tm.apply(TileShape3(*before)) == TileShape3(*after)


@pytest.mark.parametrize("tm, before", [
    (Broadcast("z", 2), (2, 1, 1)),  # broadcast z needs t == 1
    (HSlice(3), (1, 2, 4)),
    (VSlice(4), (1, 2, 4)),
    (HStack(3), (4, 2, 4)),
    (VStack(8), (4, 2, 4)),
])
def test_tm_divisibility(tm, before):
    with pytest.raises(TMError):
        tm.apply(TileShape3(*before))


def test_pad_applies_after_other_tms():
    assert apply_tms(TileShape3(1, 2, 4), [Pad(1, 0), Transpose()]) == TileShape3(1, 5, 2)


def test_all_tm_kinds_round_trip():
    n = parse_file(SPEC)
    n.graphs["fwd0"].ops["out_nop"].input_tms[0] = (
        Transpose(), HSlice(2), VSlice(1), HStack(2), VStack(1), Broadcast("z", 1), Pad(0, 0, 1.5))
    again = parse_yaml(to_yaml(n))
    assert again.graphs["fwd0"].ops["out_nop"].input_tms == n.graphs["fwd0"].ops["out_nop"].input_tms


# ---------------------------------------------------------------------------------------------------
# Strictness
# ---------------------------------------------------------------------------------------------------

def _replace(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


@pytest.mark.parametrize("old, new, path", [
    ("devices: {arch: wormhole_b0}", "devices: {arch: wormhole_b0, chips: 2}", "devices.chips"),
    ("devices: {arch: wormhole_b0}", "devices: {arch: wormhole_b0}\nextras: {}", "extras"),
    ("loc: dram, dram: [[0, 0x30000000]]}", "loc: dram, dram: [[0, 0x30000000]], colour: red}", "queues.act.colour"),
    ("math_fidelity: HiFi2, t: 1, mblock: [1,2]", "math_fidelity: HiFi2, fast: true, t: 1, mblock: [1,2]",
     "graphs.fwd0.mm0.fast"),
    ("sfpu_op: gelu}", "sfpu_op: gelu, turbo: 1}", "graphs.fwd0.mm0.attributes.turbo"),
    ("input_2_tms: [broadcast: {r: 2}]", "input_2_tms: [broadcast: {r: 2}, select: [0, 1, 2, 3]]",
     "graphs.fwd0.mm0.input_2_tms[1].select"),
    ("input_2_tms: [broadcast: {r: 2}]", "input_2_tms: [broadcast: {w: 2}]", "graphs.fwd0.mm0.input_2_tms[0].broadcast.w"),
    ("input_2_tms", "input_two_tms", "graphs.fwd0.mm0.input_two_tms"),
    ("rd_ptr_local: $lptr,", "rd_ptr_local: $lptr, rd_ptr_locale: 0,",
     "programs[0].run_fwd[4].execute.queue_settings.act.rd_ptr_locale"),
    ("execute: {graph_name: fwd0,", "execute: {graph_name: fwd0, priority: 1,", "programs[0].run_fwd[4].execute.priority"),
    ("- endloop", "- endloop\n    - jump: 3", "programs[0].run_fwd[8].jump"),
    ("- endloop", "- endloop\n    - halt", "programs[0].run_fwd[8]"),
])
def test_unknown_keys_are_rejected_with_their_path(old, new, path):
    with pytest.raises(NetlistError) as err:
        parse_yaml(_replace(spec_text(), old, new))
    assert err.value.path == path


FUSED = """
fused_ops:
  0:
    inputs: 1
    intermediates: 0
    schedules:
      -
        - e0: {type: exp, inputs: [input0], mblock: [2, 4], ublock: [1, 2], output: output%s}
"""


@pytest.mark.parametrize("extra, path", [
    (", colour: red", "fused_ops.0.schedules[0][0].e0.colour"),
    (", attributes: {bias: true}", "fused_ops.0.schedules[0][0].e0.attributes.bias"),
    (", input_0_tms: [pad: [1, 1, 0.0], fold: 2]", "fused_ops.0.schedules[0][0].e0.input_0_tms[1].fold"),
])
def test_unknown_keys_in_fused_ops(extra, path):
    with pytest.raises(NetlistError) as err:
        parse_yaml(spec_text() + FUSED % extra)
    assert err.value.path == path


def test_fused_op_section_key_rejected():
    text = spec_text() + FUSED % "" + "    priority: 3\n"
    with pytest.raises(NetlistError) as err:
        parse_yaml(text)
    assert err.value.path == "fused_ops.0.priority"


@pytest.mark.parametrize("old, new, path", [
    ("entries: 8, grid_size: [1,1], t: 1, mblock: [2,2]", "entries: '8', grid_size: [1,1], t: 1, mblock: [2,2]",
     "queues.act.entries"),
    ("entries: 8, grid_size: [1,1], t: 1, mblock: [2,2]", "entries: true, grid_size: [1,1], t: 1, mblock: [2,2]",
     "queues.act.entries"),
    ("entries: 8, grid_size: [1,1], t: 1, mblock: [2,2]", "entries: 8, grid_size: [1], t: 1, mblock: [2,2]",
     "queues.act.grid_size"),
    ("df: Bfp8_b, target_device", "df: Bfp7_b, target_device", "queues.w.df"),
    ("type: ram, entries: 1, grid_size: [1,2]", "type: fifo, entries: 1, grid_size: [1,2]", "queues.w.type"),
    ("math_fidelity: HiFi2, t: 1, mblock: [1,2]", "math_fidelity: HiFi9, t: 1, mblock: [1,2]",
     "graphs.fwd0.mm0.math_fidelity"),
    ("in_df: [Float16_b, Bfp8_b, Float16_b]", "in_df: [Float16_b, Bfp8_b, Float17]", "graphs.fwd0.mm0.in_df[2]"),
    ("untilize_output: true", "untilize_output: yes please", "graphs.fwd0.out_nop.untilize_output"),
    ("attributes: {m_k: 2,", "attributes: {m_k: 0,", "graphs.fwd0.mm0.attributes.m_k"),
    ("sfpu_op: gelu", "sfpu_op: tanh", "graphs.fwd0.mm0.attributes.sfpu_op"),
    ("input_count: 4", "input_count: four", "graphs.fwd0.input_count"),
    ("- loop: $p_loop_count", "- loop: p_loop_count", "programs[0].run_fwd[3].loop"),
    ("- varinst: [$lptr, incwrap, $c_mb, 16]", "- varinst: [$lptr, div, $c_mb, 16]", "programs[0].run_fwd[5].varinst[1]"),
    ("- var: {$c_zero: 0, $c_mb: 4}", "- var: {$c_zero: zero, $c_mb: 4}", "programs[0].run_fwd[1].var.$c_zero"),
    ("prologue: true, epilogue: false, zero: false, rd_ptr_global: $c_zero, wr_ptr_global: $c_zero},\n",
     "prologue: maybe, epilogue: false, zero: false, rd_ptr_global: $c_zero, wr_ptr_global: $c_zero},\n",
     "programs[0].run_fwd[4].execute.queue_settings.w.prologue"),
    ("devices: {arch: wormhole_b0}", "devices: {arch: tpu}", "devices.arch"),
])
def test_wrong_types_are_rejected(old, new, path):
    with pytest.raises(NetlistError) as err:
        parse_yaml(_replace(spec_text(), old, new))
    assert err.value.path == path


@pytest.mark.parametrize("old, new, path", [
    ("df: Float16_b, target_device: 0, loc: dram, dram: [[0,", "target_device: 0, loc: dram, dram: [[0,",
     "queues.act.df"),
    ("mm0: {type: matmul, ", "mm0: {", "graphs.fwd0.mm0.type"),
    ("    input_count: 4\n", "", "graphs.fwd0.input_count"),
    ("buf_size_mb: 2, input_2_tms", "input_2_tms", "graphs.fwd0.mm0.buf_size_mb"),
    ("devices: {arch: wormhole_b0}\n", "", "devices"),
    ("- execute: {graph_name: fwd0, ", "- execute: {", "programs[0].run_fwd[4].execute.graph_name"),
])
def test_missing_required_fields(old, new, path):
    with pytest.raises(NetlistError) as err:
        parse_yaml(_replace(spec_text(), old, new))
    assert err.value.path == path


def test_duplicate_keys_are_rejected():
    text = _replace(spec_text(), "  out:  {input: out_nop", "  act:  {input: HOST, type: queue}\n  out:  {input: out_nop")
    with pytest.raises(NetlistError) as err:
        parse_yaml(text)
    assert err.value.path == "queues.act" and "duplicate" in str(err.value)


@pytest.mark.parametrize("text", ["devices: [", "{a: 1} {b: 2}", ": : :"])
def test_invalid_yaml(text):
    with pytest.raises(NetlistError):
        parse_yaml(text)


def test_empty_sections_are_rejected():
    with pytest.raises(NetlistError) as err:
        parse_yaml(_replace(spec_text(), "programs:\n", "programs: []\nold_programs:\n"))
    assert err.value.path in ("programs", "old_programs")


def test_ignored_bbe_sections():
    n = parse_yaml(spec_text() + "performance-check: {x: 1}\n")
    assert n == parse_file(SPEC)


def test_arch_selection_for_multi_arch_netlists():
    text = _replace(spec_text(), "devices: {arch: wormhole_b0}", "devices: {arch: [grayskull, WORMHOLE_B0]}")
    n = parse_yaml(text)
    assert n.devices_arch == ("grayskull", "wormhole_b0") and n.arch is None
    with pytest.raises(NetlistError) as err:
        validate(n)
    assert err.value.path == "devices.arch"
    validate(n, get_device_descriptor(device_config="wh_n150"))  # the device picks the arch
    assert parse_yaml(text, arch="wormhole_b0").arch == "wormhole_b0"
    with pytest.raises(NetlistError):
        parse_yaml(text, arch="blackhole")
    with pytest.raises(NetlistError):
        parse_yaml(spec_text(), arch="grayskull")


def test_parser_does_not_read_the_environment(monkeypatch):
    monkeypatch.setenv("ARCH_NAME", "grayskull")
    text = _replace(spec_text(), "devices: {arch: wormhole_b0}", "devices: {arch: [grayskull, wormhole_b0]}")
    assert parse_yaml(text).arch is None


# ---------------------------------------------------------------------------------------------------
# L1 sizing (shared with the balancer)
# ---------------------------------------------------------------------------------------------------

def test_l1_usage_of_spec_matmul():
    n = parse_file(SPEC)
    mm0 = n.graphs["fwd0"].ops["mm0"]
    usage = op_l1_usage(n, mm0, prologue={1, 2})
    f16, bfp8 = 2080, 1120
    assert usage.buffers == {
        "output": 2 * 8 * f16,              # buf_size_mb x mblock (1x2 ublocks of 2x2)
        "intermed": 8 * f16,                # m_k > 1 and bias spill to intermediates
        "input_0": 2 * (1 * 2) * 2 * f16,   # two columns of in0 ublocks: 2 x mblock_m·ublock_rt·u_kt
        "input_1": 1 * (2 * 2) * 4 * bfp8,  # prologue weights: K x (mblock_n·ublock_ct) per core
        "input_2": 8 * f16,                 # prologue bias: one output mblock
    }
    streaming = op_l1_usage(n, mm0)
    assert streaming.buffers["input_1"] == 2 * 2 * (2 * 2) * bfp8  # 2 x u_kt·mblock_n·ublock_ct


def test_l1_usage_of_sparse_matmul_tables():
    """A sparse matmul keeps its picker tiles (in0) whole and its grid row's share of the index (in2)
    resident: the same figure the legalizer uses (cost.sparse_table_tiles_per_core)."""
    n = parse_file(SPEC)
    mm0 = n.graphs["fwd0"].ops["mm0"]
    del mm0.attributes["bias"]
    mm0.attributes["identity"] = True
    mm0.grid_size = (2, 1)
    usage = op_l1_usage(n, mm0, prologue={0, 2})
    f16 = 2080
    assert usage.buffers["input_0"] == 2 * 4 * f16    # all 8 tiles of 'act' as the picker table
    assert usage.buffers["input_2"] == 4 * f16        # 8 tiles of 'bias' as the index, split over 2 rows


def test_tms_may_be_given_in_yaml_form():
    op = parse_file(SPEC).graphs["fwd0"].ops["mm0"]
    built = NetlistOp(name="x", type="nop", grid_loc=(0, 0), grid_size=(1, 1), inputs=["a"], in_df=["Float16_b"],
                      out_df="Float16_b", intermed_df="Float16_b", acc_df="Float16_b", math_fidelity="LoFi", t=1,
                      mblock=(1, 1), ublock=(1, 1), buf_size_mb=2,
                      input_tms={0: ["transpose", {"broadcast": {"r": 2}}, {"hstack": 2}, {"pad": [1, 0, 0.5]}]})
    assert built.input_tms[0] == (Transpose(), Broadcast("r", 2), HStack(2), Pad(1, 0, 0.5))
    assert op.tms_of(2) == (Broadcast("r", 2),)
    with pytest.raises(NetlistError) as err:
        NetlistOp(name="x", type="nop", grid_loc=(0, 0), grid_size=(1, 1), inputs=["a"], in_df=["Float16_b"],
                  out_df="Float16_b", intermed_df="Float16_b", acc_df="Float16_b", math_fidelity="LoFi", t=1,
                  mblock=(1, 1), ublock=(1, 1), buf_size_mb=2, input_tms={0: [{"gather": 1}]})
    assert err.value.path == "x.input_0_tms[0].gather"


def test_loader_matches_safe_load_and_refuses_python_tags():
    import yaml
    from pybuda.netlist import load_yaml
    for path in (SPEC, RICH):
        assert load_yaml(path.read_text()) == yaml.safe_load(path.read_text())
    with pytest.raises(NetlistError):
        load_yaml("a: !!python/object/apply:os.getcwd []\n")
    with pytest.raises(NetlistError):
        load_yaml("a: 1\n---\nb: 2\n")
