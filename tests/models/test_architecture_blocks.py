"""Blocks of published architectures that no zoo model contains (``tools/architecture_blocks.py``: ConvNeXt,
MBConv with squeeze-excitation, Swin's shifted windows, MLP-Mixer, ShuffleNet, DenseNet, WaveNet, PointNet,
a graph convolution, a LLaMA block ...), run through the user's path (``PyTorchModule`` on a golden
``TTDevice``, ``run_inference``) by the idiom sweep's harness and compared with torch eager: each runs on the
device, or with its embedding on the host (TT-Buda's default), and matches -- Float32 on Wormhole, and the
default formats (Float16_b, HiFi3/LoFi) on Grayskull."""

import pathlib
import sys

import pytest

_TOOLS = pathlib.Path(__file__).resolve().parents[2] / "tools"
sys.path.insert(0, str(_TOOLS))

import architecture_blocks  # noqa: E402
import torch_idiom_sweep as sweep  # noqa: E402

#: Blocks whose token ids feed an embedding, which stays on the host by default (cpu_fallback_ops).
EMBEDDING_ON_HOST = {"lstm_language_model", "causal_decoder"}


@pytest.mark.parametrize("arch,defaults", [("wormhole_b0", False), ("grayskull", True)],
                         ids=["wormhole-float32", "grayskull-defaults"])
@pytest.mark.parametrize("name", sorted(architecture_blocks.BLOCKS))
def test_architecture_block_runs_on_the_device_and_matches_torch(name, arch, defaults):
    outcome, detail = sweep.run_case("arch_" + name, arch, defaults, timeout=300)
    expected = "PARTIAL-FALLBACK" if name in EMBEDDING_ON_HOST else "DEVICE"
    assert outcome == expected, detail
    if outcome == "PARTIAL-FALLBACK":
        assert detail == "host ops: aten.embedding.default", detail
