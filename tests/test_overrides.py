"""The override APIs of issue #17, each called as TT-Buda documents it, checked on the netlist, the placement
or the numerics of a small compiled module."""

import sys
from pathlib import Path

import pytest
import torch

import pybuda
from pybuda.compile import compile_graph
from pybuda.config import _clear_global_compiler_config, _get_global_compiler_config
from pybuda.dtypes import DataFormat as DF
from pybuda.errors import ConfigError
from pybuda.golden.executor import GoldenExecutor, executor_inputs
from pybuda.verify import calculate_pcc

sys.path.insert(0, str(Path(__file__).parent / "compile"))
from modules import MLP, inputs_for  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_config(tmp_path):
    _clear_global_compiler_config()
    _get_global_compiler_config().backend_output_dir = str(tmp_path)
    yield
    _clear_global_compiler_config()


def _compile():
    m = MLP()
    ins = inputs_for(m)
    graph, _ = m.trace(*ins)
    return compile_graph(graph, "wh_n150", None, inputs=list(ins)), list(ins)


def _run(r, ins):
    netlist, host_io, tensors = executor_inputs(r)
    return GoldenExecutor(netlist, host_io, tensors, fast=False).run(ins)


def _graph_of(r, op):
    return [g for g in r.netlist.graphs.values() if op in g.ops][0]


def test_query_predicates_combine_and_match_whole_names():
    q = pybuda.query
    p = q.name_regex("fc.*") & q.op_type("matmul").negate()
    assert p.matches("fc1", "add") and not p.matches("fc1", "matmul") and not p.matches("xfc1", "add")
    assert (q.name_regex("fc") | ~q.op_type("add")).matches("fc", "add")
    assert not q.name_regex("fc").matches("fc1", "matmul")  # std::regex_match: the whole name
    assert q.NodePredicateBuilder.from_json(p.to_json()) == p
    with pytest.raises(ConfigError):
        q.name_regex("(")


def test_set_epoch_break_with_a_predicate_and_a_list():
    pybuda.set_epoch_break(pybuda.query.name_regex("softmax\\.max"))
    pybuda.set_epoch_break(["ln.square", "ln.sub_mean"])  # a list breaks at its first op in schedule order
    r, _ = _compile()
    assert list(_graph_of(r, "softmax.max").ops)[0] == "softmax.max"
    assert list(_graph_of(r, "ln.sub_mean").ops)[0] == "ln.sub_mean"
    assert len(r.netlist.graphs) == 3


def test_epoch_break_on_an_op_that_would_be_fused_still_breaks():
    pybuda.set_epoch_break("gelu")  # gelu is otherwise fused into fc1's epilogue
    r, ins = _compile()
    g = _graph_of(r, "gelu")
    assert list(g.ops)[0] == "gelu" and "fc1" not in g.ops
    _clear_global_compiler_config()
    base, _ = _compile()
    assert calculate_pcc(_run(r, ins)[0], _run(base, ins)[0]) > 0.99


@pytest.mark.parametrize("api, args", [
    (pybuda.set_epoch_break, ("fc3",)),
    (pybuda.set_chip_break, ("fc3",)),
    (pybuda.override_op_size, ("fc3", (1, 1))),
    (pybuda.override_op_placement, ("fc3",)),
    (pybuda.add_schedule_constraint, (["fc1", "fc3"],)),
])
def test_unknown_op_names_are_config_errors_with_close_matches(api, args):
    api(*args) if api is not pybuda.override_op_placement else api(*args, start=(0, 0))
    with pytest.raises(ConfigError, match=r"'fc3'.*close matches: \[.*'fc[12]'"):
        _compile()


def test_unknown_dram_queue_is_a_config_error():
    pybuda.override_dram_queue_placement("mlp.w3", chip_id=0, channel=1)
    with pytest.raises(ConfigError, match="mlp.w3.*close matches.*mlp.w[12]"):
        _compile()


def test_insert_nop_appears_in_the_netlist_and_numerics_are_unchanged():
    base, ins = _compile()
    _clear_global_compiler_config()
    pybuda.insert_nop("fc2", "softmax.max", nop_count=2)
    r, _ = _compile()
    g = _graph_of(r, "softmax.max")
    nops = [n for n in g.ops if n.startswith("buffer_")]
    assert len(nops) == 2 and all(g.ops[n].type == "nop" for n in nops)
    assert g.ops["softmax.max"].inputs[0] == nops[-1] and g.ops[nops[0]].inputs[0] == "fc2"
    assert torch.equal(_run(r, ins)[0], _run(base, ins)[0])


def test_insert_nop_daisy_chain_and_buffering_alias():
    base, ins = _compile()
    _clear_global_compiler_config()
    pybuda.insert_buffering_nop("fc2", ["softmax.max", "softmax.sub_max"], daisy_chain=True)
    r, _ = _compile()
    ops = {n: op for g in r.netlist.graphs.values() for n, op in g.ops.items()}
    first = ops["softmax.max"].inputs[0]
    assert ops[first].type == "nop" and ops[first].inputs[0] == "fc2"
    second = [i for i in ops["softmax.sub_max"].inputs if i.startswith("buffer_")][0]
    assert ops[second].type == "nop" and ops[second].inputs[0] == first  # the chain passes softmax.max, then softmax.sub_max (kept apart from fusion)
    assert torch.equal(_run(r, ins)[0], _run(base, ins)[0])


def test_insert_nop_on_a_missing_edge_is_a_config_error():
    pybuda.insert_nop("fc1", "fc2")  # fc2 reads gelu, not fc1
    with pytest.raises(ConfigError, match="does not read"):
        _compile()


def test_schedule_constraint_orders_independent_ops():
    pybuda.add_schedule_constraint(["ln.square", "ln.mean"])  # ln.square depends on ln.mean
    with pytest.raises(ConfigError, match="contradict"):
        _compile()


def test_schedule_constraint_reorders_the_schedule():
    r0, _ = _compile()
    order0 = [n for g in r0.netlist.graphs.values() for n in g.ops]
    assert order0.index("softmax.max") < order0.index("softmax.exp")
    _clear_global_compiler_config()
    # softmax.recip and ln-independent ops: put the reciprocal before the max-reduction's user chain allows
    pybuda.add_schedule_constraint(["fc2", "softmax.max"])
    r, _ = _compile()
    order = [n for g in r.netlist.graphs.values() for n in g.ops]
    assert order.index("fc2") < order.index("softmax.max")


def test_override_input_buffer_multiplier_sizes_the_buffer():
    r0, _ = _compile()
    pybuda.override_input_buffer_multiplier("fc2", 0, multiplier=3)
    r, _ = _compile()
    op = _graph_of(r, "fc2").ops["fc2"]
    assert op.input_buf_min_size_tiles is not None and op.input_buf_min_size_tiles[0] > 0
    assert op.input_buf_min_size_tiles[1:] == (0,) * (len(op.input_buf_min_size_tiles) - 1)
    assert r.balancer_solution.op_models["fc2"].l1_bytes > r0.balancer_solution.op_models["fc2"].l1_bytes
    assert _graph_of(r0, "fc2").ops["fc2"].input_buf_min_size_tiles is None


def test_override_input_buffer_multiplier_bad_operand():
    pybuda.override_input_buffer_multiplier("fc2", 7, multiplier=2)
    with pytest.raises(ConfigError, match="operand"):
        _compile()
    with pytest.raises(ConfigError):
        pybuda.override_input_buffer_multiplier("fc2", 0, multiplier=0)


def test_insert_fracture_group_is_refused_naming_the_ops():
    pybuda.insert_fracture_group([("mlp.w1", -1, 2), "fc1"], chip_ids=[0])
    cfg = _get_global_compiler_config()
    assert cfg.fracture_groups[0][0][0] == ("mlp.w1", [-1], [2])
    with pytest.raises(ConfigError, match="fracture.*mlp.w1.*fc1"):
        _compile()


def test_set_num_repeated_patterns_is_recorded_and_logged_once(caplog):
    import pybuda.option_rules as option_rules

    option_rules._logged_once.discard("set_num_repeated_patterns")
    pybuda.set_num_repeated_patterns("encoder", 12)
    pybuda.set_num_repeated_patterns("decoder", 6)
    assert _get_global_compiler_config().tvm_module_to_num_patterns == {"encoder": 12, "decoder": 6}
    assert sum("set_num_repeated_patterns" in r.message for r in caplog.records) == 1
    r, _ = _compile()  # no effect on the compile
    assert r.netlist is not None


def test_configure_mixed_precision_name_regex_matches_whole_names():
    pybuda.configure_mixed_precision(name_regex="fc", output_df=DF.Bfp8_b)  # fc1/fc2 do not fully match
    pybuda.configure_mixed_precision(name_regex="softmax\\.re.*", output_df=DF.Float16)
    r, _ = _compile()
    ops = {n: op for g in r.netlist.graphs.values() for n, op in g.ops.items()}
    assert ops["fc2"].out_df != DF.Bfp8_b
    assert ops["softmax.recip"].out_df == DF.Float16


@pytest.mark.parametrize("level", [1, 2])
def test_amp_levels_follow_tt_buda(level):
    pybuda.set_configuration_options(amp_level=level)
    r, ins = _compile()
    ops = {n: op for g in r.netlist.graphs.values() for n, op in g.ops.items()}
    if level == 1:  # mixed B formats
        assert ops["fc2"].out_df == DF.Bfp8_b and ops["fc2"].math_fidelity.name == "HiFi2"
        assert r.netlist.queues["mlp.w2"].df == DF.Bfp8_b
    else:  # mixed A formats
        assert ops["fc2"].out_df == DF.Bfp8 and ops["fc2"].acc_df == DF.Float16
        assert r.netlist.queues["mlp.w2"].df == DF.Bfp8
    out = _run(r, ins)[0]
    _clear_global_compiler_config()
    base, _ = _compile()
    assert calculate_pcc(out, _run(base, ins)[0]) > 0.98


def test_amp_level_outside_tt_budas_levels_is_skipped(caplog):
    pybuda.set_configuration_options(amp_level=3)
    r, _ = _compile()
    ops = {n: op for g in r.netlist.graphs.values() for n, op in g.ops.items()}
    assert ops["fc2"].out_df not in (DF.Bfp8_b, DF.Bfp4_b)
