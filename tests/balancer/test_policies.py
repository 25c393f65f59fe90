"""Balancer policies: every policy gives a valid, placeable solution; NLP/Ribbon targets; Random seeds."""

import pytest

from pybuda.arch import get_device_descriptor
from pybuda.balancer import balance, normalize_policy
from pybuda.balancer.synthetic import bert_encoder_graph, chain_graph
from pybuda.config import CompilerConfig, OpOverride
from pybuda.errors import CompileError
from pybuda.placer import place
from pybuda.placer.validate import validate_solution

POLICIES = ["NLP", "Ribbon", "MinimizeGrid", "MaximizeTMinimizeGrid", "Random", "SingleOpPerEpoch"]
DEVICES = {name: get_device_descriptor(device_config=name) for name in ("gs_e150", "wh_n150", "gs_e75")}


@pytest.fixture(scope="module")
def small_bert():
    return bert_encoder_graph(layers=2, seq_tiles=4, hidden_tiles=8, heads=4, microbatch=8)


@pytest.mark.parametrize("device", list(DEVICES))
@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_gives_a_valid_placement(small_bert, policy, device):
    d = DEVICES[device]
    cfg = CompilerConfig(balancer_policy=policy)
    sol = balance(small_bert, d, cfg)
    assert sol.policy == policy
    assert set(sol.op_models) == set(small_bert.ops)
    placement = place(small_bert, sol, d, cfg)
    assert validate_solution(small_bert, sol, placement, d, cfg) == []
    if policy == "SingleOpPerEpoch":
        assert len(placement.epochs) == len(small_bert.ops)


def test_random_is_reproducible_by_seed(small_bert):
    d = DEVICES["gs_e150"]
    a = balance(small_bert, d, CompilerConfig(balancer_policy="Random", random_policy_seed=3))
    b = balance(small_bert, d, CompilerConfig(balancer_policy="Random", random_policy_seed=3))
    c = balance(small_bert, d, CompilerConfig(balancer_policy="Random", random_policy_seed=4))
    assert a.op_models == b.op_models
    assert a.op_models != c.op_models


def test_minimize_grid_and_maximize_t():
    g = chain_graph([(1, 4, 4), (1, 4, 4), (1, 4, 4)], with_output=False)
    d = DEVICES["gs_e150"]
    mg = balance(g, d, CompilerConfig(balancer_policy="MinimizeGrid"))
    assert all(m.grid_shape == (1, 1) and m.stream_factor == 1 for m in mg.op_models.values())
    mt = balance(g, d, CompilerConfig(balancer_policy="MaximizeTMinimizeGrid"))
    assert all(m.t == 4 and m.grid_shape == (1, 1) for m in mt.op_models.values())  # 4 rows or 4 cols


def test_nlp_target_and_prologue_preference(small_bert):
    d = DEVICES["wh_n150"]
    sol = balance(small_bert, d, CompilerConfig())
    assert sol.policy == "NLP" and sol.target_cycles and sol.target_cycles > 0
    # matmul weights stay resident in L1 when a model allows it
    for name, m in sol.op_models.items():
        if name.endswith(".mm"):
            assert m.prologue_inputs == (1,), name


def test_nlp_ops_meet_the_target_when_they_can(small_bert):
    from pybuda.balancer import Legalizer
    d = DEVICES["gs_e150"]
    cfg = CompilerConfig()
    sol = balance(small_bert, d, cfg)
    leg = Legalizer(small_bert, d, cfg)
    for op in small_bert.ops.values():
        fastest = min(m.cycles for m in leg.models(op))
        chosen = sol.op_models[op.name]
        assert chosen.cycles <= max(sol.target_cycles, fastest) or chosen.cycles == fastest


def test_ribbon_commits_epochs_as_breaks(small_bert):
    d = DEVICES["gs_e75"]
    cfg = CompilerConfig(balancer_policy="Ribbon")
    sol = balance(small_bert, d, cfg)
    placement = place(small_bert, sol, d, cfg)
    starts = {e.ops[0] for e in placement.epochs}
    assert set(sol.epoch_breaks) <= starts


def test_policy_names():
    assert normalize_policy("default") == "NLP"
    assert normalize_policy("CNN") == "Ribbon"
    assert normalize_policy("nope") == "MinimizeGrid"


def test_overrides_are_honoured_by_every_policy(small_bert):
    d = DEVICES["gs_e150"]
    overrides = {"l0.ff1.mm": OpOverride(grid_shape=(2, 4)), "l1.gelu": OpOverride(t_stream_shape=(2, 1)),
                 "l0.q.mm": OpOverride(u_kt=2)}
    for policy in POLICIES:
        cfg = CompilerConfig(balancer_policy=policy, balancer_op_overrides=overrides)
        sol = balance(small_bert, d, cfg)
        assert sol["l0.ff1.mm"].grid_shape == (2, 4)
        assert sol["l1.gelu"].t_stream_factor == (2, 1)
        assert sol["l0.q.mm"].u_kt == 2 and sol["l0.q.mm"].m_k == 4
        placement = place(small_bert, sol, d, cfg)
        assert validate_solution(small_bert, sol, placement, d, cfg) == []


def test_illegal_override_fails_balance(small_bert):
    cfg = CompilerConfig(balancer_op_overrides={"l0.ff1.mm": OpOverride(grid_shape=(3, 3))}, enable_t_streaming=False)
    with pytest.raises(CompileError) as err:
        balance(small_bert, DEVICES["gs_e150"], cfg)
    assert err.value.op == "l0.ff1.mm" and err.value.stage == "BALANCER_PASS"


def test_bert_large_on_e150_packs_densely():
    """BERT-Large seq 384 (24 layers, Bfp8/LoFi) on gs_e150: far fewer epochs than TT-Buda's 74."""
    g = bert_encoder_graph(layers=24)
    d = DEVICES["gs_e150"]
    cfg = CompilerConfig()
    sol = balance(g, d, cfg)
    placement = place(g, sol, d, cfg)
    assert len(placement.epochs) <= 45
    assert validate_solution(g, sol, placement, d, cfg) == []


def test_ribbon_shares_the_dram_channels_among_an_epochs_ops():
    """With every weight streamed from DRAM, the ops of one epoch share the chip's channels: Ribbon
    starts a new epoch rather than let their streaming together exceed the epoch's target (an op that
    alone exceeds it still gets an epoch)."""
    from pybuda.balancer.synthetic import chain_graph
    from pybuda.perf import cost

    g = chain_graph([(1, 4, 32)] * 8, ["matmul"] * 8, microbatch=64)
    d = DEVICES["gs_e150"]
    cfg = CompilerConfig(balancer_policy="Ribbon", default_dram_parameters=True)
    sol = balance(g, d, cfg)
    placement = place(g, sol, d, cfg)
    assert validate_solution(g, sol, placement, d, cfg) == []
    dram_total = cost.device_bandwidth(d).dram_total
    by_epoch = [[sol.op_models[name] for name in placement.ops_in_epoch(e)] for e in range(len(placement.epochs))]
    assert len(by_epoch) > 1
    for models in by_epoch:
        assert all(m.dram_bytes > 0 for m in models)
        if len(models) > 1:
            streamed = sum(m.dram_bytes for m in models) / dram_total
            assert streamed <= max(sol.target_cycles, max(m.cycles for m in models)) * 1.0001

