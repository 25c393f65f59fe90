"""ONNX embedding lookups (a Gather of a weight initializer's rows by run-time integer ids) are the registry's
``embedding``, placed by the same rules as the torch frontend's ``aten.embedding``: on the CPU while
``embedding`` is in ``cpu_fallback_ops`` (TT-Buda's default), on the device (a one-hot matmul) otherwise.

A Hugging Face BERT exported with ``torch.onnx.export`` used to run its word and token-type Gathers on the CPU
because the run-time ids went through int64 moves the device does not keep, and its attention-mask Expand (an
identity on a boolean mask, a ``nop``) because booleans were refused for anything but comparisons and selects.
"""

import io

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import pybuda
from pybuda.config import CompilerConfig
from pybuda.frontend.onnx import import_model
from pybuda.verify import calculate_pcc

from onnx_helpers import ort_run

#: The simulated chip at its default formats (bfloat16 activations) against ONNX Runtime in float32.
DEVICE_PCC = 0.99


def _config(embedding_on_cpu: bool) -> CompilerConfig:
    cfg = CompilerConfig()
    cfg.cpu_fallback_ops = ["embedding"] if embedding_on_cpu else []
    return cfg


def _lookup_model(vocab: int, dim: int = 32) -> onnx.ModelProto:
    """``relu(table[ids] @ w)`` with the table and ``w`` initializers."""
    rng = np.random.default_rng(0)
    table = numpy_helper.from_array(rng.standard_normal((vocab, dim)).astype(np.float32), "table")
    w = numpy_helper.from_array((rng.standard_normal((dim, 32)) / 6).astype(np.float32), "w")
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"]), helper.make_node("MatMul", ["e", "w"], ["m"]),
             helper.make_node("Relu", ["m"], ["y"])]
    graph = helper.make_graph(nodes, "lookup", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 32])], [table, w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _ids(vocab: int, shape=(1, 16)) -> torch.Tensor:
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(1))


def test_a_gather_of_table_rows_is_an_embedding_placed_by_cpu_fallback_ops():
    model, ids = _lookup_model(100), _ids(100)
    default = import_model(model, ids.numpy(), config=_config(True), for_device=True)
    (op,) = default.report.fallback_ops
    assert op.reason == "'embedding' is in cpu_fallback_ops"
    on_device = import_model(model, ids.numpy(), config=_config(False), for_device=True)
    assert not on_device.report.has_fallback, str(on_device.report)
    assert "embedding" in {n.op_type for n in on_device.graph.ops}


def test_a_table_beyond_the_device_embedding_says_why():
    from pybuda.passes.graph.lookups import EMBEDDING_MAX_ROWS

    vocab = EMBEDDING_MAX_ROWS + 1
    cap = import_model(_lookup_model(vocab, dim=1), _ids(vocab).numpy(), config=_config(False), for_device=True)
    (op,) = cap.report.fallback_ops
    assert f"'embedding' of {vocab} rows" in op.reason and f"at most {EMBEDDING_MAX_ROWS} rows" in op.reason


def test_an_embedding_runs_on_the_device():
    model, ids = _lookup_model(100), _ids(100)
    pybuda.remove_cpu_fallback_ops("embedding")
    tt = pybuda.TTDevice("tt0", module=pybuda.OnnxModule("lookup", model))
    got = pybuda.run_inference(inputs=[(ids,)]).get(timeout=300)[0].value()
    assert tt.cpu_fallback_device_pre is None and tt.cpu_fallback_device_post is None
    want = torch.from_numpy(ort_run(model, [ids.numpy()])[0])
    assert calculate_pcc(got, want) >= DEVICE_PCC


def _bert_onnx():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=128, max_position_embeddings=64)
    torch.manual_seed(0)
    bert = transformers.BertModel(cfg).eval()

    class Outputs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            out = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            return out.last_hidden_state, out.pooler_output

    ids = _ids(1000, (1, 32))
    mask = torch.ones(1, 32, dtype=torch.int64)
    mask[0, 26:] = 0
    types = torch.zeros(1, 32, dtype=torch.int64)
    types[0, 12:] = 1
    buf = io.BytesIO()
    torch.onnx.export(Outputs().eval(), (ids, mask, types), buf, opset_version=17, dynamo=False,
                      input_names=["input_ids", "attention_mask", "token_type_ids"])
    return onnx.load_from_string(buf.getvalue()), (ids, mask, types)


def test_bert_embeddings_and_mask_expand_map_like_the_torch_frontend():
    model, inputs = _bert_onnx()
    arrays = [t.numpy() for t in inputs]
    default = import_model(model, *arrays, config=_config(True), for_device=True)
    # Only the two lookups by run-time ids stay on the CPU (cpu_fallback_ops), as aten.embedding does in the
    # torch frontend; the position lookup (constant ids) and the mask's Expand run on the device.
    assert sorted(op.aten_op for op in default.report.fallback_ops) == ["Gather", "Gather"]
    assert {op.reason for op in default.report.fallback_ops} == {"'embedding' is in cpu_fallback_ops"}
    assert default.report.host_fraction < 0.03, str(default.report)
    on_device = import_model(model, *arrays, config=_config(False), for_device=True)
    assert not on_device.report.has_fallback, str(on_device.report)


def test_bert_runs_wholly_on_the_device_against_onnx_runtime():
    model, inputs = _bert_onnx()
    pybuda.remove_cpu_fallback_ops("embedding")
    tt = pybuda.TTDevice("tt0", module=pybuda.OnnxModule("bert", model))
    got = [o.value() for o in pybuda.run_inference(inputs=[inputs]).get(timeout=600)]
    assert tt.cpu_fallback_device_pre is None and tt.cpu_fallback_device_post is None
    want = ort_run(model, [t.numpy() for t in inputs])
    for g, w in zip(got, want):
        assert calculate_pcc(g.float(), torch.from_numpy(w)) >= DEVICE_PCC


def _gather_model(vocab: int, dim: int = 8) -> onnx.ModelProto:
    """``table[ids]`` (a weight initializer) and ``x[:, ids]`` (an activation), ids pushed at run time."""
    rng = np.random.default_rng(1)
    table = numpy_helper.from_array(rng.standard_normal((vocab, dim)).astype(np.float32), "table")
    nodes = [helper.make_node("Gather", ["table", "ids"], ["rows"]),
             helper.make_node("Relu", ["x"], ["act"]),
             helper.make_node("Gather", ["act", "cols"], ["picked"], axis=1)]
    graph = helper.make_graph(
        nodes, "gathers",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 24]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 50, dim]),
         helper.make_tensor_value_info("cols", TensorProto.INT64, [1, 12])],
        [helper.make_tensor_value_info("rows", TensorProto.FLOAT, [1, 24, dim]),
         helper.make_tensor_value_info("picked", TensorProto.FLOAT, [1, 1, 12, dim])], [table])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _gather_inputs(vocab: int):
    gen = torch.Generator().manual_seed(7)
    ids = torch.randint(-vocab, vocab, (1, 24), generator=gen)
    ids[0, :4] = torch.tensor([-1, -vocab, vocab - 1, 0])
    return ids, torch.randn(1, 50, 8, generator=gen), torch.randint(-50, 50, (1, 12), generator=gen)


@pytest.mark.parametrize("vocab", [100, 3000])
def test_negative_gather_indices_count_from_the_end_on_the_device(vocab):
    """ONNX Gather wraps an index in [-n, -1] to n + index: the device looks it up so (the host pushes the wrapped
    ids as digits), bit for bit ONNX Runtime's rows at Float32, for a table of rows and for an activation."""
    model, inputs = _gather_model(vocab), _gather_inputs(vocab)
    pybuda.remove_cpu_fallback_ops("embedding")
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32)
    tt = pybuda.TTDevice("tt0", module=pybuda.OnnxModule("gathers", model), arch=pybuda.BackendDevice.Wormhole_B0)
    got = [o.value() for o in pybuda.run_inference(inputs=[inputs]).get(timeout=300)]
    assert tt.cpu_fallback_device_pre is None and tt.cpu_fallback_device_post is None
    for g, w in zip(got, ort_run(model, [t.numpy() for t in inputs])):
        assert torch.equal(g.float(), torch.from_numpy(w))


def test_gather_indices_outside_the_table_are_refused_at_push():
    """ONNX Runtime raises on an index outside [-n, n - 1]; on the device it would select no row, so the host
    refuses the push (an InputError naming the input and the first bad value)."""
    vocab = 3000
    model, (ids, x, cols) = _gather_model(vocab), _gather_inputs(vocab)
    pybuda.remove_cpu_fallback_ops("embedding")
    pybuda.TTDevice("tt0", module=pybuda.OnnxModule("gathers", model))
    pybuda.run_inference(inputs=[(ids, x, cols)]).get(timeout=300)
    for bad in (vocab, -vocab - 1):
        wrong = ids.clone()
        wrong[0, 3] = bad
        with pytest.raises(pybuda.errors.InputError, match=rf"input 'ids'.*\[-{vocab}, {vocab - 1}\].*first value "
                                                          rf"outside: {bad}"):
            pybuda.run_inference(inputs=[(wrong, x, cols)]).get(timeout=120)


def test_gather_elements_by_pushed_negative_indices_runs_on_the_device():
    """GatherElements along the last axis by indices pushed at run time (negative ones count from the end): the
    indices pick one-hot rows of an identity on the device, exact at the default formats (the picked values are
    the activation's Float16_b values)."""
    from pybuda.golden.formats import quantize

    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("GatherElements", ["a", "idx"], ["y"], axis=2)]
    graph = helper.make_graph(nodes, "pick", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6, 40]),
                                              helper.make_tensor_value_info("idx", TensorProto.INT64, [1, 6, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    gen = torch.Generator().manual_seed(8)
    x, idx = torch.randn(1, 6, 40, generator=gen), torch.randint(-40, 40, (1, 6, 5), generator=gen)
    tt = pybuda.TTDevice("tt0", module=pybuda.OnnxModule("pick", model), arch=pybuda.BackendDevice.Wormhole_B0)
    got = pybuda.run_inference(inputs=[(x, idx)]).get(timeout=300)[0].value()
    assert tt.cpu_fallback_device_pre is None and tt.cpu_fallback_device_post is None
    want = torch.from_numpy(ort_run(model, [x.numpy(), idx.numpy()])[0])
    assert torch.equal(got.float(), quantize(want, pybuda.DataFormat.Float16_b))
    with pytest.raises(pybuda.errors.InputError, match=r"input 'idx'.*\[-40, 39\].*first value outside: 40"):
        pybuda.run_inference(inputs=[(x, torch.where(idx == idx[0, 0, 0], 40, idx))]).get(timeout=120)
