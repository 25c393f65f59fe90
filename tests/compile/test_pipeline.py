"""The compile pipeline end to end: stages, entry points, errors, netlist structure, artifacts, CLI."""

import json
import os

import pytest
import torch

import pybuda
from modules import MLP, Attention, ConvBlock, inputs_for
from pybuda.config import CompileDepth, CompilerConfig
from pybuda.errors import CompileError
from pybuda.ir.graph import Graph
from pybuda.netlist import AllocateQueue, DeallocateQueue, Execute, Loop, VarInst, parse_yaml, to_yaml, validate
from pybuda.compile import CompileResults, compile_graph, pybuda_compile
from pybuda.passes.pipeline import STAGES
from pybuda.verify import VerifyConfig, calculate_pcc


@pytest.fixture
def cfg(tmp_path):
    c = CompilerConfig()
    c.backend_output_dir = str(tmp_path)
    return c


def _graph(module=None, microbatch=1):
    module = module or MLP()
    graph, _ = module.trace(*inputs_for(module, microbatch))
    return graph


def test_stages_are_tt_budas_compile_depths_in_order():
    assert [d for d, _ in STAGES] == [d for d in CompileDepth if d != CompileDepth.FULL]


def test_compile_freezes_what_the_process_held_and_thaws_it(cfg):
    # Full collections during a compile skip the objects that were there before it (gc.freeze), and
    # they are collectable again afterwards, also after a failed compile.
    import gc

    import pybuda.passes.pipeline as pipeline

    seen = []
    first = pipeline.STAGES[0]
    try:
        pipeline.STAGES[0] = (first[0], lambda s: (seen.append(gc.get_freeze_count()), first[1](s)))
        compile_graph(_graph(), "wh_n150", cfg)
        assert seen[0] > 0 and gc.get_freeze_count() == 0
        pipeline.STAGES[0] = (first[0], lambda s: 1 / 0)
        with pytest.raises(CompileError):
            compile_graph(_graph(), "wh_n150", cfg)
        assert gc.get_freeze_count() == 0
        # A freeze that was there before (the user's, or an outer compile's) is neither redone nor thawed.
        pipeline.STAGES[0] = first
        gc.freeze()
        frozen = gc.get_freeze_count()
        compile_graph(_graph(), "wh_n150", cfg)
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
        pipeline.STAGES[0] = first


def test_bookkeeping_stages_run_torch_on_one_thread_and_restore_the_callers_count(cfg):
    # The stages that only compute on the compiler's small tensors use one intra-op thread; the ones that
    # may run the whole model keep the caller's threads; the caller's count is back afterwards, also after
    # a failed stage.
    import pybuda.passes.pipeline as pipeline

    saved_stages, saved_threads = list(pipeline.STAGES), torch.get_num_threads()
    seen = {}

    def spy(depth, fn):
        return lambda s: (seen.__setitem__(depth, torch.get_num_threads()), fn(s))

    try:
        torch.set_num_threads(2)
        pipeline.STAGES[:] = [(d, spy(d, fn)) for d, fn in saved_stages]
        compile_graph(_graph(), "wh_n150", cfg)
        assert seen[CompileDepth.CONSTEVAL_GRAPH] == seen[CompileDepth.BUDA_GRAPH_PRE_PLACER] == 1
        assert seen[CompileDepth.GENERATE_INITIAL_GRAPH] == seen[CompileDepth.BACKEND_GOLDEN_VERIFY] == 2
        assert torch.get_num_threads() == 2
        pipeline.STAGES[3] = (saved_stages[3][0], lambda s: 1 / 0)
        with pytest.raises(CompileError):
            compile_graph(_graph(), "wh_n150", cfg)
        assert torch.get_num_threads() == 2
    finally:
        pipeline.STAGES[:] = saved_stages
        torch.set_num_threads(saved_threads)

@pytest.mark.parametrize("depth", list(CompileDepth))
def test_compile_depth_stops_after_each_stage(depth, cfg):
    cfg.compile_depth = depth
    r = compile_graph(_graph(), "wh_n150", cfg)
    assert r.compile_depth == depth
    assert list(r.stage_timings)[-1] == (depth.name if depth != CompileDepth.FULL else "BACKEND_GOLDEN_VERIFY")
    assert (r.lowered_graph is not None) == (depth >= CompileDepth.BUDA_GRAPH_PRE_PLACER)
    assert (r.placer_solution is not None) == (depth >= CompileDepth.BALANCER_PASS)
    assert (r.netlist is not None) == (depth >= CompileDepth.GENERATE_NETLIST)


def test_pybuda_compile_with_a_pybuda_module(cfg):
    module = MLP()
    r = pybuda_compile(module, "mlp", *inputs_for(module), compiler_cfg=cfg, verify_cfg=VerifyConfig())
    assert isinstance(r, CompileResults) and r.compile_depth == CompileDepth.FULL
    assert r.initial_graph is not None and r.lowered_graph is not None and r.netlist is not None
    assert r.golden_outputs and calculate_pcc(r.golden_outputs[0], r.outputs[0]) > 0.9999
    assert r.summary.epochs == len(r.placer_solution.epochs) >= 1
    assert len(r.summary.cores_per_epoch) == r.summary.epochs
    assert os.path.exists(r.netlist_filename) and r.netlist_filename.endswith("mlp_netlist.yaml")
    snapshot = json.load(open(r.artifacts["config"]))
    assert snapshot["device"]["arch"] == "grayskull" and snapshot["compiler_config"]["enable_auto_fusing"] is True
    report = json.load(open(r.artifacts["placement_json"]))
    assert sum(len(e["ops"]) for e in report["epochs"]) == len(r.lowered_graph.ops)
    assert "epoch 0" in open(r.artifacts["placement_txt"]).read()
    assert r.pass_specific_output_kwargs["placer_solution"] is r.placer_solution


def test_pybuda_compile_with_a_pytorch_module(cfg):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 32))
    x = torch.randn(1, 32, 64)
    r = pybuda_compile(pybuda.PyTorchModule("torch_mlp", model), "torch_mlp", x, compiler_cfg=cfg,
                       verify_cfg=VerifyConfig())
    assert calculate_pcc(model(x).detach(), r.outputs[0]) > 0.999
    mms = [op for op in r.lowered_graph.ops.values() if op.type == "matmul"]
    assert any(op.attrs.get("sfpu_op") == "gelu" and op.attrs.get("bias") for op in mms)


@pytest.mark.parametrize("module", [MLP, Attention, ConvBlock])
@pytest.mark.parametrize("device", ["gs_e150", "wh_n150"])
def test_netlists_reparse_and_validate(module, device, cfg):
    m = module()
    r = compile_graph(_graph(m), device, cfg, VerifyConfig(), inputs=inputs_for(m))
    text = to_yaml(r.netlist)
    again = parse_yaml(text)
    validate(again, r.device)
    assert to_yaml(again) == text
    assert calculate_pcc(r.golden_outputs[0], r.outputs[0]) > 0.9999


def test_program_streams_inputs_and_loads_parameters_in_prologue(cfg):
    r = compile_graph(_graph(microbatch=2), "wh_n150", cfg, microbatch=2)
    n = r.netlist
    prog = n.program("run_fwd_0")
    assert [type(i).__name__ for i in prog.instructions[:3]] == ["Param", "Var", "StaticVar"]
    assert any(isinstance(i, Loop) and i.count == "$p_loop_count" for i in prog.instructions)
    assert all(g.input_count == 2 for g in n.graphs.values())
    x = n.queues["x"]
    assert x.input == "HOST" and x.type == "queue" and x.entries == 4 and x.loc == "host"
    ex = [i for i in prog.instructions if isinstance(i, Execute)][0]
    assert ex.queue_settings["x"].rd_ptr_local.startswith("$lptr")
    incs = [i for i in prog.instructions if isinstance(i, VarInst)]
    assert incs and all(i.op == "incwrap" and i.args == ("$c_microbatch_size", 2 * x.entries) for i in incs)
    params = [q for q in n.queues.values() if q.type == "ram"]
    assert params and all(q.entries == 1 and q.loc == "dram" for q in params)
    assert all(ex.queue_settings[q.name].wr_ptr_global == "$c_zero" for q in params if q.name in ex.queue_settings)


def test_epoch_breaks_make_epoch_to_epoch_queues_with_lifetimes(cfg):
    cfg.place_on_new_epoch(["fc2"])
    r = compile_graph(_graph(), "wh_n150", cfg)
    n = r.netlist
    assert len(n.graphs) >= 2 and r.summary.epochs == len(n.graphs)
    e2e = [q for q in n.queues.values() if q.name.startswith("e2e_")]
    assert e2e and all(q.type == "queue" and q.input in {op for _, op in _ops(n)} for q in e2e)
    prog = n.program("run_fwd_0").instructions
    allocs = [i for i in prog if isinstance(i, AllocateQueue)]
    deallocs = [i for i in prog if isinstance(i, DeallocateQueue)]
    assert {q.name for q in e2e} == {x for a in allocs for x in a.names} == {x for d in deallocs for x in d.names}
    consumer_graph = [g for g in n.graphs.values() if "fc2" in g.ops][0]
    assert any(i.startswith("e2e_") for i in consumer_graph.ops["fc2"].inputs)


def _ops(n):
    return [(g.name, op) for g in n.graphs.values() for op in g.ops]


def test_errors_name_the_stage(cfg):
    g = Graph("bad")
    g.add_input("acc", (1, 8, 32))
    g.add_input("scale", (1, 8, 32))
    g.add_op("rq", "buda_requantize", ["acc", "scale"])
    g.add_output("out", "rq")
    with pytest.raises(CompileError) as e:
        compile_graph(g, "wh_n150", cfg)
    assert e.value.stage == "POST_INITIAL_GRAPH_PASS" and "rq" in str(e.value)

    g = Graph("bad2")
    g.add_input("a", (1, 32, 32))
    g.add_input("i", (4,), torch.int64)
    g.add_input("v", (1, 4, 32))
    g.add_op("copy", "index_copy", ["a", "i", "v"], {"dim": 1})
    g.add_output("out", "copy")
    with pytest.raises(CompileError) as e:
        compile_graph(g, "wh_n150", cfg)
    assert e.value.stage == "BUDA_GRAPH_PRE_PLACER" and e.value.op == "copy"

    cfg.enable_training = True
    with pytest.raises(CompileError) as e:
        compile_graph(_graph(), "wh_n150", cfg)
    assert e.value.stage == "INIT_COMPILE"


def test_unexpected_exceptions_are_wrapped_with_the_stage(cfg, monkeypatch):
    import pybuda.passes.graph.optimize_tms as opt

    def boom(graph, ctx):
        raise RuntimeError("boom")

    monkeypatch.setattr(opt, "optimize_tms", boom)
    with pytest.raises(CompileError) as e:
        compile_graph(_graph(), "wh_n150", cfg)
    assert e.value.stage == "OPTIMIZED_GRAPH" and "boom" in str(e.value)


def test_config_is_snapshotted_and_global_config_is_the_default(tmp_path):
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Bfp8_b)
    from pybuda.config import _get_global_compiler_config

    _get_global_compiler_config().backend_output_dir = str(tmp_path)
    r = compile_graph(_graph(), "wh_n150")
    assert r.config.default_df_override == pybuda.DataFormat.Bfp8_b
    assert r.config is not _get_global_compiler_config()
    assert r.lowered_graph.ops["fc1"].out_df == pybuda.DataFormat.Bfp8_b


def test_build_dir_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PYBUDA_BUILD_DIR", str(tmp_path / "build"))
    r = compile_graph(_graph(), "wh_n150", CompilerConfig())
    assert r.netlist_filename == str(tmp_path / "build" / "mlp_netlist.yaml")
    assert os.path.exists(tmp_path / "build" / "compile_and_runtime_config.json")


def test_device_descriptor_and_backend_device_are_accepted(cfg):
    from pybuda.arch import BackendDevice, get_device_descriptor

    r = compile_graph(_graph(), get_device_descriptor(device_config="gs_e75"), cfg)
    assert r.netlist.arch == "grayskull"
    r = compile_graph(_graph(), BackendDevice.Wormhole_B0, cfg)
    assert r.netlist.arch == "wormhole_b0"


def test_compile_cli_on_a_tiny_model(tmp_path, capsys):
    from pybuda.cli.compile import run

    rc = run(["-m", "bert", "-c", "tiny", "--device-config", "wh_n150", "-df", "Bfp8_b", "-mf", "LoFi",
              "--seq-len", "64", "-mb", "1", "--output-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0 and "epoch(s)" in out and "cores per epoch" in out
    assert (tmp_path / "bert_tiny_encoder_netlist.yaml").exists()


def test_verify_all_checks_every_graph_stage(cfg):
    module = Attention()
    r = compile_graph(_graph(module), "wh_n150", cfg, VerifyConfig(verify_all=True), inputs=inputs_for(module))
    assert r.compile_depth == CompileDepth.FULL and r.outputs


def test_backend_golden_verify_runs_the_netlist(cfg):
    pytest.importorskip("pybuda.golden.executor")
    module = ConvBlock()
    r = compile_graph(_graph(module), "gs_e150", cfg, VerifyConfig(run_golden=True), inputs=inputs_for(module))
    outs = r.notes["backend_golden_outputs"]
    assert calculate_pcc(r.golden_outputs[0], outs[0]) > 0.999


def test_pybuda_compile_with_a_ttdevice(cfg):
    from pybuda.arch import BackendDevice, BackendType

    module = MLP()
    dev = pybuda.TTDevice("tt0", arch=BackendDevice.Wormhole_B0, devtype=BackendType.Golden)
    dev.place_module(module)
    r = pybuda_compile(dev, "mlp", *inputs_for(module), compiler_cfg=cfg)
    assert r.netlist.arch == "wormhole_b0" and r.compile_depth == CompileDepth.FULL


def test_a_compile_outside_the_main_thread_leaves_torchs_thread_count_alone(cfg):
    # torch's intra-op thread count is process-wide: a device compiling in a worker thread must not change
    # it under another thread (two of them could restore each other's 1 and leave the process on one).
    import threading

    import pybuda.passes.pipeline as pipeline

    saved_stages, saved_threads = list(pipeline.STAGES), torch.get_num_threads()
    seen = []
    try:
        torch.set_num_threads(2)
        pipeline.STAGES[:] = [(d, (lambda fn: lambda s: (seen.append(torch.get_num_threads()), fn(s)))(fn))
                              for d, fn in saved_stages]
        worker = threading.Thread(target=lambda: compile_graph(_graph(), "wh_n150", cfg))
        worker.start()
        worker.join()
        assert seen and set(seen) == {2}
    finally:
        pipeline.STAGES[:] = saved_stages
        torch.set_num_threads(saved_threads)
