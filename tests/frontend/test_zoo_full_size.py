"""Every zoo model at full size captures into an ir.Graph whose CPU execution matches torch in float32."""

import pytest

from pybuda.frontend.torch import capture
from pybuda.models import get_model

FULL_SIZE = [("bert", "base", {}), ("bert", "large", {"seq_len": 384}), ("gpt2", "small", {}),
             ("vit", "base", {}), ("resnet", "resnet50", {}), ("mobilenet_v1", "base", {}),
             ("mobilenet_v2", "base", {}), ("whisper", "tiny", {})]


@pytest.mark.slow
@pytest.mark.parametrize("name,variant,kw", FULL_SIZE, ids=[f"{n}-{v}" for n, v, _ in FULL_SIZE])
def test_full_size_zoo_model_matches_torch(name, variant, kw, fe):
    spec = get_model(name, variant, **kw)
    result = capture(spec.module, spec.example_inputs, graph_name=spec.full_name)
    want = fe.torch_outputs(spec.module, spec.example_inputs)
    fe.matches(result.run(*spec.example_inputs), want, atol=1e-3)
    assert result.report.host_fraction < 0.1
