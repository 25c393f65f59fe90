"""Device images of ONNX models split for CPU fallback: the ONNX CPU stages are stored as their ONNX
subgraphs (data, no pickles or code) and run through ONNX Runtime when the image is loaded elsewhere."""

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

import pybuda
from pybuda.errors import ImageError
from pybuda.tti.archive import read_archive
from test_image_round_trip import _in_process, run_in_fresh_process


def _split_model():
    """Floor (host, pre) -> MatMul -> Relu (device) -> Ceil (host, post)."""
    x_vi = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 64])
    y_vi = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 48])
    w = np.random.default_rng(0).standard_normal((64, 48)).astype(np.float32) * 0.1
    nodes = [helper.make_node("Floor", ["x"], ["f"]), helper.make_node("MatMul", ["f", "w"], ["m"]),
             helper.make_node("Relu", ["m"], ["r"]), helper.make_node("Ceil", ["r"], ["y"])]
    graph = helper.make_graph(nodes, "split", [x_vi], [y_vi], [onnx.numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _compile(tmp_path, x):
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32)
    device = pybuda.TTDevice("tt0", module=pybuda.OnnxModule("split", _split_model()))
    path = str(tmp_path / "split.tti")
    image = device.compile_to_image(img_path=path, sample_inputs=(x,))
    pybuda.pybuda_reset()
    return path, image


def test_onnx_cpu_stages_are_stored_as_onnx_data(tmp_path):
    x = torch.randn(1, 32, 64) * 4
    path, image = _compile(tmp_path, x)
    assert image.cpu_pre.format == "onnx" and image.cpu_post.format == "onnx"
    files = read_archive(path)
    stored = sorted(n for n in files if n.startswith("cpu_stages/"))
    assert stored == ["cpu_stages/split_cpu_post.onnx", "cpu_stages/split_cpu_pre.onnx"]
    pre = onnx.load_from_string(files["cpu_stages/split_cpu_pre.onnx"])
    assert [n.op_type for n in pre.graph.node] == ["Floor"]


def test_onnx_image_round_trips_in_a_fresh_process(tmp_path):
    x = torch.randn(1, 32, 64) * 4
    path, _ = _compile(tmp_path, x)
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32)
    expected = _in_process([pybuda.OnnxModule("split", _split_model())], [x])
    got = run_in_fresh_process(path, [x], tmp_path)
    assert len(got) == len(expected) == 1 and got[0].shape == (1, 32, 48)
    assert torch.equal(got[0], expected[0])
    # ... and it is the model: Ceil(Relu(Floor(x) @ w)), up to ceil's steps at Float32 matmul rounding.
    w = onnx.numpy_helper.to_array(_split_model().graph.initializer[0])
    np.testing.assert_allclose(got[0].numpy(), np.ceil(np.maximum(np.floor(x.numpy()) @ w, 0)), rtol=0, atol=1.0)


def test_a_tampered_onnx_stage_is_refused_at_load(tmp_path):
    from pybuda.tti.image import _read_cpu_stage

    item = {"name": "bad", "format": "onnx", "graph": "cpu_stages/bad.onnx", "per_sample_shapes": [[1, 4]]}
    with pytest.raises(ImageError, match="invalid"):
        _read_cpu_stage({"cpu_stages/bad.onnx": b"\x08\x07garbage"}, item, "pre")
    with pytest.raises(ImageError, match="format"):
        _read_cpu_stage({}, {**item, "format": "pickle"}, "pre")
    # A stage whose initializer points at a file outside the image.
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    w = onnx.numpy_helper.from_array(np.ones(4, np.float32), "w")
    w.data_location = TensorProto.EXTERNAL
    w.ClearField("raw_data")
    w.external_data.add(key="location", value="../../etc/passwd")
    model = helper.make_model(helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g", [x], [y], [w]),
                              opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ImageError, match="external data"):
        _read_cpu_stage({"cpu_stages/bad.onnx": model.SerializeToString()}, item, "pre")
