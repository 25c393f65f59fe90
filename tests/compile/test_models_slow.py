"""Whole models compile into netlists that re-parse and validate (slow: captures real model graphs).

BERT-base (seq 128), BERT-Large (seq 384), ResNet-50 and MobileNetV2 (224x224) for Grayskull e150 and
Wormhole n150; each model is captured once and compiled for both cards.
"""

import functools

import pytest

from pybuda.config import CompilerConfig
from pybuda.netlist import parse_yaml, to_yaml, validate
from pybuda.compile import compile_graph

MODELS = {
    "bert_base": ("bert", "base", {"seq_len": 128}),
    "bert_large_384": ("bert", "large", {"seq_len": 384}),
    "resnet50": ("resnet", "resnet50", {}),
    "mobilenet_v2": ("mobilenet_v2", "base", {}),
}


@functools.lru_cache(maxsize=None)
def _captured(key):
    from pybuda.models import get_model

    name, variant, size = MODELS[key]
    spec = get_model(name, variant, **size)
    capture = spec.to_pybuda().to_graph(*spec.example_inputs)
    assert capture.pre is None and capture.post is None, "the whole model should run on the device"
    return capture.graph


@pytest.mark.slow
@pytest.mark.parametrize("device", ["gs_e150", "wh_n150"])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_model_compiles_to_a_valid_netlist(model, device, tmp_path):
    cfg = CompilerConfig()
    cfg.backend_output_dir = str(tmp_path)
    results = compile_graph(_captured(model), device, cfg)
    text = to_yaml(results.netlist)
    # Plain validate(): its queue_dram_overlap rule lets e2e queues with disjoint lifetimes share DRAM.
    validate(parse_yaml(text), results.device)
    summary = results.summary
    assert summary.epochs == len(results.netlist.graphs) >= 1
    assert all(0 < c <= results.device.grid_rows * results.device.grid_cols for c in summary.cores_per_epoch)
    if model.startswith("bert") and device == "gs_e150":
        # TT-Buda needed 74 epochs for BERT-Large on one Grayskull; one epoch per encoder layer or fewer here.
        layers = 24 if "large" in model else 12
        assert summary.epochs <= layers
