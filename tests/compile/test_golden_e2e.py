"""Compiled netlists run on the golden backend (the chip's numerics) and match the model on the CPU."""

import pytest

from modules import MLP, Attention, ConvBlock, inputs_for
from pybuda.config import CompilerConfig
from pybuda.compile import compile_graph
from pybuda.verify import calculate_pcc, run_graph_on_cpu

golden_executor = pytest.importorskip("pybuda.golden.executor")


@pytest.mark.parametrize("microbatch", [1, 2])
@pytest.mark.parametrize("device", ["gs_e150", "wh_n150"])
@pytest.mark.parametrize("module", [MLP, Attention, ConvBlock])
def test_compiled_netlist_runs_on_the_golden_backend(module, device, microbatch, tmp_path):
    m = module()
    x = inputs_for(m, microbatch)
    graph, _ = m.trace(*x)
    cfg = CompilerConfig()
    cfg.backend_output_dir = str(tmp_path)
    results = compile_graph(graph, device, cfg, None, microbatch)
    out = golden_executor.create_executor(results, microbatch=microbatch).run(x)
    for want, got in zip(run_graph_on_cpu(graph, x), out):
        assert got.shape == want.shape
        assert calculate_pcc(want, got) > 0.999  # Float16_b storage, HiFi3 fidelity
