"""Legal op models: divisibility, Dest, L1, grid fit, K blocking, t-streaming and overrides."""

import random

import pytest

from pybuda.arch import get_device_descriptor
from pybuda.perf.cost import tile_size_bytes
from pybuda.balancer import Legalizer, legal_op_models, stream_compatible, stream_edge_tms
from pybuda.balancer.blocking import divisors, ublock_candidates
from pybuda.balancer.edges import stacks_ok
from pybuda.balancer.synthetic import bert_encoder_graph, chain_graph
from pybuda.netlist.tms import Broadcast
from pybuda.netlist.tms import tms_shape as apply_tms
from pybuda.config import CompilerConfig, OpOverride
from pybuda.errors import CompileError
from pybuda.ir.lowered import BudaGraph, BudaOp, BudaQueue, TileShape
from pybuda.placer.validate import validate_op_model
from pybuda.dtypes import DataFormat as DF, MathFidelity as MF

GS = get_device_descriptor(device_config="gs_e150")
WH = get_device_descriptor(device_config="wh_n150")  # 9x8 after harvesting


def _graph(op_type, out, in_shapes, kinds, *, tms=None, attrs=None, acc_df=DF.Float16_b, dfs=None):
    """One op reading queues (kinds: input/parameter/constant) or producer ops ("op")."""
    g = BudaGraph("g")
    names = []
    for i, (shape, kind) in enumerate(zip(in_shapes, kinds)):
        df = dfs[i] if dfs else DF.Float16_b
        if kind == "op":
            g.add_queue(BudaQueue(f"src{i}", "input", TileShape(1, *shape), df=df))
            g.add_op(BudaOp(f"p{i}", "nop", [f"src{i}"], TileShape(1, *shape), in_df=[df], out_df=df))
            names.append(f"p{i}")
        else:
            g.add_queue(BudaQueue(f"q{i}", kind, TileShape(1, *shape), df=df))
            names.append(f"q{i}")
    g.add_op(BudaOp("x", op_type, names, TileShape(1, *out), attrs=dict(attrs or {}), input_tms=dict(tms or {}),
                    in_df=[dfs[i] if dfs else DF.Float16_b for i in range(len(names))], acc_df=acc_df,
                    math_fidelity=MF.HiFi2))
    return g


def _check_all(g, device, config):
    leg = Legalizer(g, device, config)
    op = g.ops["x"]
    models = leg.models(op)
    assert models
    for m in models:
        assert validate_op_model(op, m, leg) == [], m
        assert m.ublock_order == "r"
        assert m.grid_shape[0] <= device.grid_rows and m.grid_shape[1] <= device.grid_cols
        assert m.l1_bytes <= device.l1_pybuda_budget_bytes
        assert m.cycles >= m.kernel_cycles > 0
    return models


@pytest.mark.parametrize("seed", range(6))
def test_random_eltwise_and_matmul_shapes_are_legal(seed):
    rng = random.Random(seed)
    cfg = CompilerConfig()
    for _ in range(8):
        z = rng.choice([1, 1, 2, 16])
        rt, ct, k = rng.choice([1, 2, 3, 4, 6, 12, 16, 24]), rng.choice([1, 2, 4, 5, 8, 32]), rng.choice([1, 2, 8, 12, 32])
        device = rng.choice([GS, WH])
        acc = rng.choice([DF.Float16_b, DF.Float32]) if device is WH else DF.Float16_b
        df = rng.choice([DF.Float16_b, DF.Bfp8_b, DF.Float32])
        g = _graph("add", (z, rt, ct), [(z, rt, ct), (z, rt, ct)], ["op", "input"], dfs=[df, df], acc_df=acc)
        for m in _check_all(g, device, cfg):
            assert m.ublock[0] * m.ublock[1] <= (4 if acc == DF.Float32 else 8)
        g = _graph("matmul", (1, rt, ct), [(1, rt, k), (1, k, ct)], ["op", "parameter"], dfs=[df, DF.Bfp8_b])
        for m in _check_all(g, device, cfg):
            assert m.u_kt * m.m_k == k


def test_l1_accounting_matches_buffers():
    # A 1x1 nop over 4x4 Float16_b tiles: output 2 mblocks + input 2 ublocks
    g = _graph("nop", (1, 4, 4), [(1, 4, 4)], ["op"])
    m = next(m for m in Legalizer(g, GS, CompilerConfig()).models(g.ops["x"])
             if m.grid_shape == (1, 1) and m.stream_factor == 1)
    assert m.ublock == (2, 4) and m.mblock == (2, 1)
    assert m.l1_bytes == 2 * 16 * 2080 + 2 * 8 * 2080


def test_matmul_prologue_and_dram_parameters():
    g = _graph("matmul", (1, 4, 8), [(1, 4, 8), (1, 8, 8)], ["op", "parameter"])
    models = legal_op_models(g.ops["x"], g, GS, CompilerConfig())
    assert any(m.prologue_inputs == (1,) for m in models)
    forced = CompilerConfig(balancer_op_overrides={"x": OpOverride(force_dram_parameters=True)})
    assert all(m.prologue_inputs == () and m.dram_inputs == (1,)
               for m in legal_op_models(g.ops["x"], g, GS, forced))
    default_dram = CompilerConfig(default_dram_parameters=True)
    assert all(m.prologue_inputs == () for m in legal_op_models(g.ops["x"], g, GS, default_dram))


def test_huge_parameters_fall_back_to_dram():
    # 32x128 Bfp8 weights (4.6 MB) cannot be resident on any GS grid: they stream from DRAM
    g = _graph("matmul", (1, 12, 128), [(1, 12, 32), (1, 32, 128)], ["op", "parameter"], dfs=[DF.Bfp8_b] * 2)
    models = legal_op_models(g.ops["x"], g, GS, CompilerConfig())
    assert models and all(m.dram_inputs == (1,) for m in models)


def test_harvested_grid_limits_rows():
    g = _graph("nop", (1, 10, 8), [(1, 10, 8)], ["op"])
    rows = {m.grid_shape[0] for m in legal_op_models(g.ops["x"], g, WH, CompilerConfig())}
    assert 10 not in rows and max(rows) == 5  # 9 rows after harvesting; divisors of 10 that fit
    rows_gs = {m.grid_shape[0] for m in legal_op_models(g.ops["x"], g, GS, CompilerConfig())}
    assert 10 in rows_gs


def test_auto_transpose_allows_tall_grids():
    g = _graph("nop", (1, 12, 1), [(1, 12, 1)], ["op"])
    cfg = CompilerConfig(enable_auto_transposing_placement=True)
    grids = {m.grid_shape for m in legal_op_models(g.ops["x"], g, WH, cfg)}
    assert (12, 1) not in grids  # 12 rows fit neither way on a 9x8 grid
    g2 = _graph("nop", (1, 8, 1), [(1, 8, 1)], ["op"])
    assert (8, 1) in {m.grid_shape for m in legal_op_models(g2.ops["x"], g2, WH, cfg)}


def test_t_streaming_options():
    g = _graph("exp", (1, 4, 6), [(1, 4, 6)], ["op"])
    op = g.ops["x"]
    factors = {m.t_stream_factor for m in legal_op_models(op, g, GS, CompilerConfig())}
    assert factors == {(1, 1), (2, 1), (4, 1), (1, 2), (1, 3), (1, 6)}
    for m in legal_op_models(op, g, GS, CompilerConfig()):
        assert m.t == m.stream_factor
        assert m.t_stream_dir == ("n" if m.stream_factor == 1 else "r" if m.t_stream_factor[0] > 1 else "c")
    off = CompilerConfig(enable_t_streaming=False)
    assert {m.t_stream_factor for m in legal_op_models(op, g, GS, off)} == {(1, 1)}


def test_matmul_with_z_does_not_stream_and_u_kt_enumeration():
    g = _graph("matmul", (16, 12, 12), [(16, 12, 2), (16, 2, 12)], ["op", "op"])
    models = legal_op_models(g.ops["x"], g, GS, CompilerConfig())
    assert {m.stream_factor for m in models} == {1}
    g2 = _graph("matmul", (1, 2, 2), [(1, 2, 12), (1, 12, 2)], ["op", "op"])
    assert {m.u_kt for m in legal_op_models(g2.ops["x"], g2, GS, CompilerConfig())} == {12}
    cfg = CompilerConfig(balancer_op_overrides={"x": OpOverride(u_kt=3)})
    assert {(m.u_kt, m.m_k) for m in legal_op_models(g2.ops["x"], g2, GS, cfg)} == {(3, 4)}


def test_buf_size_mb_divides_t_either_way():
    g = _graph("nop", (3, 2, 2), [(3, 2, 2)], ["op"])
    for m in legal_op_models(g.ops["x"], g, GS, CompilerConfig()):
        assert m.t % m.buf_size_mb == 0 or m.buf_size_mb % m.t == 0


def test_ops_writing_queues_do_not_stream():
    g = chain_graph([(1, 4, 4), (1, 4, 4)])
    leg = Legalizer(g, GS, CompilerConfig())
    assert {m.stream_factor for m in leg.models(g.ops["op1"])} == {1}
    assert len({m.stream_factor for m in leg.models(g.ops["op0"])}) > 1


def test_cache_shares_identical_layers():
    g = bert_encoder_graph(layers=3, seq_tiles=4, hidden_tiles=8, heads=4)
    leg = Legalizer(g, GS, CompilerConfig())
    assert leg.models(g.ops["l0.ff1.mm"]) is leg.models(g.ops["l2.ff1.mm"])


# --- overrides -------------------------------------------------------------------------------------

def test_grid_override_honoured_and_rejected():
    g = _graph("nop", (1, 6, 8), [(1, 6, 8)], ["op"])
    ok = CompilerConfig(balancer_op_overrides={"x": OpOverride(grid_shape=(3, 4))})
    assert {m.grid_shape for m in legal_op_models(g.ops["x"], g, GS, ok)} == {(3, 4)}
    bad = CompilerConfig(balancer_op_overrides={"x": OpOverride(grid_shape=(4, 4))}, enable_t_streaming=False)
    with pytest.raises(CompileError, match=r"op 'x'.*grid rows 4 must divide"):
        legal_op_models(g.ops["x"], g, GS, bad)
    big = CompilerConfig(balancer_op_overrides={"x": OpOverride(grid_shape=(6, 16))})
    with pytest.raises(CompileError, match="does not fit the device's 10x12"):
        legal_op_models(g.ops["x"], g, GS, big)


def test_grid_override_that_overflows_l1_names_the_reason():
    g = _graph("nop", (1, 64, 64), [(1, 64, 64)], ["op"])
    cfg = CompilerConfig(balancer_op_overrides={"x": OpOverride(grid_shape=(1, 1), t_stream_dir="n")})
    with pytest.raises(CompileError, match=r"op 'x'.*L1"):
        legal_op_models(g.ops["x"], g, GS, cfg)


def test_t_stream_overrides():
    g = _graph("exp", (1, 4, 6), [(1, 4, 6)], ["op"])
    shape = CompilerConfig(balancer_op_overrides={"x": OpOverride(t_stream_shape=(1, 3))})
    assert {m.t_stream_factor for m in legal_op_models(g.ops["x"], g, GS, shape)} == {(1, 3)}
    rdir = CompilerConfig(balancer_op_overrides={"x": OpOverride(t_stream_dir="r")}, enable_t_streaming=False)
    assert {m.t_stream_factor for m in legal_op_models(g.ops["x"], g, GS, rdir)} == {(2, 1), (4, 1)}
    rz = CompilerConfig(balancer_op_overrides={"x": OpOverride(t_stream_dir="rz", t_stream_shape=(2, 1))})
    assert {m.t_stream_dir for m in legal_op_models(g.ops["x"], g, GS, rz)} == {"rz"}
    none = CompilerConfig(balancer_op_overrides={"x": OpOverride(t_stream_dir="n")})
    assert {m.stream_factor for m in legal_op_models(g.ops["x"], g, GS, none)} == {1}
    bad = CompilerConfig(balancer_op_overrides={"x": OpOverride(t_stream_shape=(1, 4))})
    with pytest.raises(CompileError, match="does not divide"):
        legal_op_models(g.ops["x"], g, GS, bad)
    clash = CompilerConfig(balancer_op_overrides={"x": OpOverride(t_stream_dir="c", t_stream_shape=(2, 1))})
    with pytest.raises(CompileError, match="contradicts"):
        legal_op_models(g.ops["x"], g, GS, clash)


def test_t_stream_override_on_illegal_op_is_rejected():
    g = _graph("matmul", (16, 12, 12), [(16, 12, 2), (16, 2, 12)], ["op", "op"])
    cfg = CompilerConfig(balancer_op_overrides={"x": OpOverride(t_stream_dir="r")})
    with pytest.raises(CompileError, match=r"op 'x'.*z == 1"):
        legal_op_models(g.ops["x"], g, GS, cfg)


def test_u_kt_override_rejected():
    g = _graph("matmul", (1, 2, 2), [(1, 2, 12), (1, 12, 2)], ["op", "op"])
    cfg = CompilerConfig(balancer_op_overrides={"x": OpOverride(u_kt=5)})
    with pytest.raises(CompileError, match=r"op 'x'.*does not divide the inner dimension K = 12"):
        legal_op_models(g.ops["x"], g, GS, cfg)
    g2 = _graph("exp", (1, 2, 2), [(1, 2, 2)], ["op"])
    with pytest.raises(CompileError, match="only matmul"):
        legal_op_models(g2.ops["x"], g2, GS, CompilerConfig(balancer_op_overrides={"x": OpOverride(u_kt=1)}))


def test_buffer_multiplier_overrides():
    g = _graph("nop", (1, 2, 2), [(1, 2, 2)], ["op"])
    base = {m.grid_shape: m for m in legal_op_models(g.ops["x"], g, GS, CompilerConfig(enable_t_streaming=False))}
    cfg = CompilerConfig(enable_t_streaming=False, balancer_op_overrides={
        "x": OpOverride(input_buffer_multiplier={0: 3}, output_buffer_multiplier=1)})
    for m in legal_op_models(g.ops["x"], g, GS, cfg):
        b = base[m.grid_shape]
        tiles = m.mblock_tiles
        ub = m.ublock[0] * m.ublock[1]
        assert m.buf_size_mb == 1
        assert m.l1_bytes == b.l1_bytes - tiles * 2080 + 2 * 2 * ub * 2080


def test_matmul_k_mismatch_is_a_compile_error():
    g = _graph("matmul", (1, 2, 2), [(1, 2, 4), (1, 3, 2)], ["op", "op"])
    with pytest.raises(CompileError, match="inner dimensions differ"):
        legal_op_models(g.ops["x"], g, GS, CompilerConfig())


# --- TMs, stacks, stream compatibility -------------------------------------------------------------

def test_tm_shapes():
    assert apply_tms((1, 12, 32), [{"hslice": 16}, "transpose"]) == (16, 2, 12)
    assert apply_tms((16, 12, 2), [{"hstack": 16}]) == (1, 12, 32)
    assert apply_tms((1, 1, 1), [{"broadcast": {"z": 4}}, Broadcast("r", 3)]) == (4, 3, 1)
    assert apply_tms((1, 2, 2), [{"pad": [1, 2, 0.0]}, {"tile_broadcast": "r"}]) == (1, 3, 4)


def test_stacked_input_lines_up_with_ublock():
    # merge nop: (16, 12, 2) hstacked to (1, 12, 32): the ublock width must divide 2 or be divided by it
    g = _graph("nop", (1, 12, 32), [(16, 12, 2)], ["op"], tms={0: [{"hstack": 16}]})
    leg = Legalizer(g, GS, CompilerConfig())
    for m in leg.models(g.ops["x"]):
        assert m.ublock[1] in (1, 2, 4, 8)
        assert stacks_ok((16, 12, 2), [{"hstack": 16}], "nop", 0, m)


def test_ublock_candidates_order():
    assert ublock_candidates(4, 6, 8)[0] == (4, 2)  # largest area first
    assert ublock_candidates(2, 6, 8)[0] == (1, 6)  # equal areas: wider first
    assert ublock_candidates(2, 6, 8, prefer_wide=False)[0] == (2, 3)
    assert all(r * c <= 4 for r, c in ublock_candidates(8, 8, 4))
    assert divisors(12) == (1, 2, 3, 4, 6, 12)


def test_stream_edge_tms_and_compatibility():
    g = _graph("nop", (1, 4, 8), [(1, 4, 8)], ["op"])
    models = legal_op_models(g.ops["x"], g, GS, CompilerConfig())
    r2 = next(m for m in models if m.t_stream_factor == (2, 1) and m.grid_shape == (1, 1))
    plain = next(m for m in models if m.stream_factor == 1 and m.grid_shape == (1, 1))
    assert stream_edge_tms(r2, r2, "nop", 0) == []  # same streaming: nothing to do
    assert stream_edge_tms(r2, plain, "nop", 0) == [{"vstack": 2}]
    assert stream_edge_tms(None, r2, "nop", 0) == [{"vslice": 2}]
    assert stream_edge_tms(r2, r2, "nop", 0, [{"broadcast": {"c": 1}}]) == [{"vstack": 2}, {"broadcast": {"c": 1}},
                                                                             {"vslice": 2}]
    # matmul streaming by rows: in0 sliced, in1 broadcast along z
    mm = _graph("matmul", (1, 4, 8), [(1, 4, 2), (1, 2, 8)], ["op", "parameter"])
    mr = next(m for m in legal_op_models(mm.ops["x"], mm, GS, CompilerConfig()) if m.t_stream_factor == (2, 1))
    assert stream_edge_tms(None, mr, "matmul", 0) == [{"vslice": 2}]
    assert stream_edge_tms(None, mr, "matmul", 1) == [{"broadcast": {"z": 2}}]
    assert stream_compatible(plain, r2, "nop", 0) and stream_compatible(r2, r2, "nop", 0)
    # a streamed producer whose slices (2 tile rows) do not line up with a 3-row ublock is incompatible
    g3 = _graph("nop", (1, 6, 1), [(1, 6, 1)], ["op"])
    m3 = legal_op_models(g3.ops["x"], g3, GS, CompilerConfig())
    prod = next(m for m in m3 if m.t_stream_factor == (3, 1) and m.grid_shape == (1, 1))
    cons = next(m for m in m3 if m.stream_factor == 1 and m.ublock[0] == 3)
    assert not stream_compatible(prod, cons, "nop", 0)


def test_no_model_fits_l1_error():
    # a 1-core-only reduce-like op whose single output tile row is enormous and cannot stream
    g = _graph("nop", (1, 1, 4096), [(1, 1, 4096)], ["input"])
    g.add_queue(BudaQueue("out", "output", TileShape(1, 1, 1, 4096), producer="x"))
    cfg = CompilerConfig(balancer_op_overrides={"x": OpOverride(grid_shape=(1, 1))})
    with pytest.raises(CompileError, match=r"op 'x'.*no op model fits L1.*KiB"):
        legal_op_models(g.ops["x"], g, GS, cfg)


def test_tile_size_of_formats_in_l1():
    g = _graph("nop", (1, 2, 2), [(1, 2, 2)], ["op"], dfs=[DF.Bfp8_b])
    g.ops["x"].out_df = DF.Bfp8_b
    m = next(m for m in legal_op_models(g.ops["x"], g, GS, CompilerConfig(enable_t_streaming=False))
             if m.grid_shape == (1, 1))
    assert m.l1_bytes == 2 * 4 * tile_size_bytes(DF.Bfp8_b) + 2 * 4 * tile_size_bytes(DF.Bfp8_b)


def test_fused_op_with_reduce_keeps_the_reduced_dim_on_one_core():
    g = _graph("fused_op", (16, 12, 12), [(16, 12, 12)], ["op"], attrs={"fused_op_id": 0})
    g.fused_ops[0] = {"inputs": 1, "intermediates": 1, "schedules": [[
        {"e": {"type": "exp", "inputs": ["input0"], "output": "intermed0"}},
        {"s": {"type": "reduce", "inputs": ["intermed0"], "output": "dest", "attributes": {"dim": "c"}}},
        {"m": {"type": "multiply", "inputs": ["intermed0", "dest"], "output": "output"}}]]}
    models = _check_all(g, GS, CompilerConfig())
    assert {m.grid_shape[1] for m in models} == {1}
    assert all(m.t_stream_factor[1] == 1 for m in models)
    # cost is the sum of the three sub-ops on the parent's blocking
    from pybuda.perf import cost
    m = models[0]
    assert m.kernel_cycles == cost.kernel_cycles(g.ops["x"], m, GS, fused_ops=g.fused_ops)


def test_l1_estimate_covers_the_netlist_validators_accounting():
    """The netlist validator's per-core L1 (pybuda.netlist.operands.op_l1_usage) never exceeds the
    legalizer's estimate, so every legal op model passes the validator's L1 rule."""
    from types import SimpleNamespace

    from pybuda.netlist.model import NetlistOp
    from pybuda.netlist.operands import op_l1_usage

    g = bert_encoder_graph(layers=1, seq_tiles=4, hidden_tiles=8, heads=4)
    stub = SimpleNamespace(fused_ops={}, queues={}, find_op=lambda name: None)
    leg = Legalizer(g, GS, CompilerConfig())
    checked = 0
    for op in g.ops.values():
        for m in leg.models(op)[::7]:
            attrs = {}
            if op.type == "matmul":
                attrs = {"m_k": m.m_k, "u_kt": m.u_kt}
            nl = NetlistOp(name=op.name, type=op.type, grid_size=m.grid_shape, inputs=tuple(op.inputs),
                           in_df=tuple(op.in_df), out_df=op.out_df, intermed_df=op.intermed_df, acc_df=op.acc_df,
                           math_fidelity=op.math_fidelity, t=m.t, mblock=m.mblock, ublock=m.ublock,
                           buf_size_mb=m.buf_size_mb, attributes=attrs)
            usage = op_l1_usage(stub, nl, set(m.prologue_inputs))
            assert usage.total <= m.l1_bytes, (op.name, m, usage.buffers)
            checked += 1
    assert checked > 100


def test_stacked_input_facts_keep_dict_tms_recognisable():
    """Regression: the facts' frozen TMs must still parse as hstack/vstack. Frozen as ``(("hstack", 9),)``
    they read as an unknown TM, so every blocking passed the stack check and ResNet-50 on wh_n150 failed
    netlist validation (stack_factors)."""
    from pybuda.netlist.tms import tm_names

    g = _graph("nop", (1, 7, 9), [(9, 7, 1)], ["op"], tms={0: [{"hstack": 9}]})
    leg = Legalizer(g, WH, CompilerConfig())
    (index, shape, tms), = leg.facts(g.ops["x"]).stacked_inputs
    assert tm_names(tms) == ["hstack"]
    hash(tms)
    g = _graph("nop", (1, 2, 18), [(9, 2, 2)], ["op"], tms={0: [{"hstack": 9}]})
    models = Legalizer(g, WH, CompilerConfig()).models(g.ops["x"])
    assert models
    for m in models:
        # slice width 2: the ublock width must divide 2 or be a multiple of it (3 and 9 are not)
        assert m.ublock[1] % 2 == 0 or 2 % m.ublock[1] == 0, m
        assert stacks_ok((9, 2, 2), [{"hstack": 9}], "nop", 0, m)


def test_untilizing_matmul_keeps_m_k_1():
    """Netlist rule untilize_output: an untilizing matmul needs m_k == 1, so the legalizer only offers
    u_kt == K for it (and rejects a u_kt override that splits K)."""
    g = _graph("matmul", (1, 4, 4), [(1, 4, 16), (1, 16, 4)], ["input", "parameter"])
    g.ops["x"].untilize_output = True
    cfg = CompilerConfig()
    cfg.enable_enumerate_u_kt = True
    models = Legalizer(g, WH, cfg).models(g.ops["x"])
    assert models and all(m.m_k == 1 and m.u_kt == 16 for m in models)
    cfg.balancer_op_overrides["x"] = OpOverride(u_kt=4)
    with pytest.raises(CompileError, match="m_k == 1"):
        Legalizer(g, WH, cfg).models(g.ops["x"])
    g.ops["x"].untilize_output = False  # the same override is fine for a matmul that does not untilize
    assert all(m.m_k == 4 for m in Legalizer(g, WH, cfg).models(g.ops["x"]))


def test_sparse_matmul_l1_counts_picker_tiles_not_a_dense_in0():
    """An identity matmul's in0 holds the S unique picker tiles (and in2 the index), resident whole; it
    is not a dense rows x K strip. With K = 1568 tiles (ResNet-50's stem im2col) the dense model could
    not fit any grid with the picker in prologue."""
    k, out_r, cols = 1568, 392, 2
    g = _graph("matmul", (1, out_r, cols), [(1, 12, 1), (1, k, cols), (1, 4, 1)], ["constant", "op", "constant"],
               attrs={"identity": True, "num_sparse_tiles": 12, "num_index_tiles": 4, "indices_len": 3000},
               dfs=[DF.Float16_b, DF.Float16_b, DF.RawUInt32])
    leg = Legalizer(g, WH, CompilerConfig())
    f = leg.facts(g.ops["x"])
    assert f.sparse
    models = leg.models(g.ops["x"])
    assert any(0 in m.prologue_inputs and 2 in m.prologue_inputs for m in models)
    for m in models:
        rows = m.mblock[0] * m.ublock[0]
        cols = m.mblock[1] * m.ublock[1]
        # in0: every unique picker tile; in2: this core row's share of the 4 index tiles
        assert leg._prologue_tiles(f, 0, m.t, rows, cols, m.grid_shape[0]) == 12
        assert leg._prologue_tiles(f, 2, m.t, rows, cols, m.grid_shape[0]) == -(-4 // m.grid_shape[0])
        # nothing like rows x K tiles of in0 is charged
        assert m.l1_bytes < rows * k * tile_size_bytes(DF.Float16_b) or rows * k < 64


def _u_kt_graphs():
    """Ops with a K blocking: a matmul (with and without bias), a sparse matmul, r and c reduces."""
    yield _graph("matmul", (1, 8, 8), [(1, 8, 24), (1, 24, 8)], ["op", "parameter"])
    yield _graph("matmul", (1, 8, 8), [(1, 8, 24), (1, 24, 8), (1, 1, 8)], ["op", "parameter", "parameter"],
                 attrs={"bias": True})
    yield _graph("matmul", (1, 16, 2), [(1, 12, 1), (1, 48, 2), (1, 4, 1)], ["constant", "op", "constant"],
                 attrs={"identity": True, "num_sparse_tiles": 12, "num_index_tiles": 4, "indices_len": 300},
                 dfs=[DF.Float16_b, DF.Float16_b, DF.RawUInt32])
    yield _graph("reduce", (1, 1, 8), [(1, 24, 8)], ["op"], attrs={"dim": "r", "type": "sum"})
    yield _graph("reduce", (1, 8, 1), [(1, 8, 24)], ["op"], attrs={"dim": "c", "type": "sum"})


@pytest.mark.parametrize("g", list(_u_kt_graphs()), ids=["matmul", "bias", "sparse", "reduce_r", "reduce_c"])
def test_input_buffers_grow_with_u_kt(g):
    """The legalizer skips a blocking whose least L1 does not fit, taking that least at u_kt = K or at the
    smallest u_kt: every streamed input buffer must be non-decreasing in u_kt for that to hold."""
    leg = Legalizer(g, GS, CompilerConfig())
    f = leg.facts(g.ops["x"])
    assert f.k > 1
    for ur in divisors(8):
        for uc in divisors(8):
            for mb in ((1, 1), (2, 1), (1, 4), (3, 2)):
                for i in range(f.n_inputs):
                    sizes = [leg._stream_buffer_tiles(f, i, ur, uc, mb, u_kt) for u_kt in divisors(f.k)]
                    assert sizes == sorted(sizes), (i, ur, uc, mb, sizes)
