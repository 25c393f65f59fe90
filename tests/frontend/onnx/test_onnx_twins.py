"""ONNX models compile to the same kind of netlist as their PyTorch twins: ResNet-50 and BERT-base from the
model zoo, exported from torch to ONNX, compiled (compile only, no numerics) for a Wormhole n150 next to the
zoo's PyTorch version; epochs and modelled samples/s agree within 10 %.

The export keeps BatchNormalization nodes (``TrainingMode.PRESERVE`` without constant folding): the
exporter's default folds them into the convolutions' weights, which makes a different (smaller) model
than the PyTorch one the torch frontend captures.
"""

import io
import warnings

import pytest
import torch

from pybuda.compile import compile_graph
from pybuda.config import CompilerConfig
from pybuda.frontend.onnx import import_model
from pybuda.models import get_model
from pybuda.perf.model import estimate_compiled

DEVICE = "wh_n150"
#: Largest relative difference of the ONNX twin's epochs and modelled samples/s from the PyTorch model's.
TWIN_TOLERANCE = 0.10


def _export(module, sample):
    import onnx

    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), sample, buf, opset_version=17, dynamo=False, do_constant_folding=False,
                          training=torch.onnx.TrainingMode.PRESERVE)
    return onnx.load_from_string(buf.getvalue())


def _perf(graph):
    cfg = CompilerConfig(device_config=DEVICE)
    return estimate_compiled(compile_graph(graph, DEVICE, cfg, None, 1), microbatch=1)


@pytest.mark.slow
@pytest.mark.parametrize("name,variant,kw", [("resnet", "resnet50", {}), ("bert", "base", {"seq_len": 128})])
def test_onnx_export_compiles_like_its_pytorch_twin(name, variant, kw):
    spec = get_model(name, variant, **kw)
    sample = tuple(t[:1] for t in spec.example_inputs)
    torch_perf = _perf(spec.to_pybuda().to_graph(*sample, graph_name=f"{name}_torch").graph)

    model = _export(spec.module, sample)
    cap = import_model(model, *[t.numpy() for t in sample], name=f"{name}_onnx",
                       config=CompilerConfig(device_config=DEVICE), for_device=True)
    assert cap.pre is None and cap.post is None and cap.host is None, str(cap.report)
    onnx_perf = _perf(cap.graph)

    def rel(a, b):
        return abs(a - b) / max(abs(b), 1e-9)

    assert rel(onnx_perf.num_epochs, torch_perf.num_epochs) <= TWIN_TOLERANCE, \
        f"epochs: ONNX {onnx_perf.num_epochs}, PyTorch {torch_perf.num_epochs}"
    assert rel(onnx_perf.samples_per_sec, torch_perf.samples_per_sec) <= TWIN_TOLERANCE, \
        f"samples/s: ONNX {onnx_perf.samples_per_sec:.1f}, PyTorch {torch_perf.samples_per_sec:.1f}"
