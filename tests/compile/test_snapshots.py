"""Netlist snapshots of small PyBuda modules.

The golden YAML files live in ``tests/compile/snapshots/``. A change in any compile stage that changes a
netlist shows up here as a diff; when the change is intended, regenerate them on purpose with
``PYBUDA_UPDATE_SNAPSHOTS=1 pytest tests/compile/test_snapshots.py`` and review the diff.
"""

import difflib
import os

import pytest

from modules import MLP, Attention, ConvBlock, inputs_for
from pybuda.config import CompilerConfig
from pybuda.netlist import parse_yaml, to_yaml, validate
from pybuda.compile import compile_graph
from pybuda.dtypes import DataFormat, MathFidelity

SNAPSHOTS = os.path.join(os.path.dirname(__file__), "snapshots")

CASES = {
    "mlp_wh_n150": (MLP, "wh_n150", {}),
    "mlp_gs_e150_bfp8_lofi": (MLP, "gs_e150", {"default_df_override": DataFormat.Bfp8_b,
                                                "default_math_fidelity": MathFidelity.LoFi}),
    "attention_wh_n150": (Attention, "wh_n150", {}),
    "convblock_gs_e150": (ConvBlock, "gs_e150", {}),
    "mlp_mb2_wh_n150": (MLP, "wh_n150", {"microbatch": 2}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_netlist_snapshot(case, tmp_path):
    module_cls, device, options = CASES[case]
    options = dict(options)
    microbatch = options.pop("microbatch", 1)
    cfg = CompilerConfig()
    cfg.backend_output_dir = str(tmp_path)
    for key, value in options.items():
        setattr(cfg, key, value)
    module = module_cls()
    graph, _ = module.trace(*inputs_for(module, microbatch))
    results = compile_graph(graph, device, cfg, microbatch=microbatch)
    text = to_yaml(results.netlist)
    validate(parse_yaml(text), results.device)
    path = os.path.join(SNAPSHOTS, f"{case}.yaml")
    if os.environ.get("PYBUDA_UPDATE_SNAPSHOTS") == "1" or not os.path.exists(path):
        if os.environ.get("PYBUDA_UPDATE_SNAPSHOTS") != "1":
            pytest.fail(f"missing snapshot {path}; create it with PYBUDA_UPDATE_SNAPSHOTS=1")
        os.makedirs(SNAPSHOTS, exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        return
    expected = open(path).read()
    if text != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True), "snapshot", "now", n=1))
        pytest.fail(f"netlist of {case} changed (PYBUDA_UPDATE_SNAPSHOTS=1 regenerates it):\n{diff[:6000]}")
