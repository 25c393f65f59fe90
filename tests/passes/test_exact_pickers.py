"""Float32 data moved by picker matmuls keeps every bit (passes/lowered/exact_pickers.py): an unaligned slice,
a concatenation, a gather or a depth-to-space copied the data through source registers that keep 9 or 10
mantissa bits, so ``torch.cat([x[:, 3:9], x[:, :3]], 1)`` at Float32 differed from torch by 1.7e-3."""

import pytest
import torch

from pybuda.compile import compile_graph, module_to_graph
from pybuda.config import CompilerConfig
from pybuda.dtypes import DataFormat as DF
from pybuda.dtypes import MathFidelity as MF
from pybuda.golden.executor import create_executor
from pybuda.module import PyTorchModule
from pybuda.passes.lowered.exact_pickers import EXACT_PICKER_PART


class _Moves(torch.nn.Module):
    """``fn(x) + 0``: the data movement under test, then an exact op (an output of a bare picker would be one)."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x) + 0.0


MOVES = {
    "slice_and_concatenate": (lambda x: torch.cat([x[:, 3:9], x[:, :3]], 1), (1, 12, 32)),
    "strided_rows": (lambda x: x[:, 5:17:2], (1, 40, 32)),
    "gather": (lambda x: x[:, torch.tensor([3, 1, 7, 7])], (1, 12, 32)),
    "pixel_shuffle": (lambda x: torch.nn.functional.pixel_shuffle(x, 2), (1, 8, 6, 6)),
    "unaligned_columns": (lambda x: torch.cat([x[..., 5:20], x[..., :3]], -1), (1, 8, 40)),
    # a run-time index (proven in range) along the last dim: the data moves to rows by a rotation whose column
    # picker is sliced into z, its padding is zeroed, and a one-hot matmul reads it; each must copy it whole
    "runtime_index_select": (lambda x: torch.relu(x).index_select(2, x[0, 0].argmax(0, keepdim=True)), (3, 4, 10)),
    # plain matmuls with a constant one-hot matrix (decompositions and the frontend's constant gather)
    "nearest_resize": (lambda x: torch.nn.functional.interpolate(x, scale_factor=2, mode="nearest"), (1, 4, 6, 6)),
    "permutation": (lambda x: x[..., torch.tensor([5, 0, 3, 3, 1, 4, 2, 2, 0, 1, 7, 6, 9, 8, 8])], (1, 6, 10)),
}


def _compile(fn, shape, device="wh_n150", df=DF.Float32, exact=True, fidelity=MF.HiFi4):
    cfg = CompilerConfig(default_df_override=df, exact_data_movement=exact)
    if df is not None:
        cfg.default_math_fidelity = fidelity
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    graph = module_to_graph(PyTorchModule("moves", _Moves(fn).eval()), [x]).graph
    return compile_graph(graph, device, cfg), x


@pytest.mark.parametrize("device", ["wh_n150", "bh_p150"])
@pytest.mark.parametrize("name", list(MOVES))
def test_float32_data_movement_is_bit_exact(name, device):
    fn, shape = MOVES[name]
    results, x = _compile(fn, shape, device)
    assert results.notes["exact_pickers"] > 0
    got = create_executor(results).run([x])[0]
    assert torch.equal(got.reshape(fn(x).shape), fn(x))


def test_a_one_hot_matmul_at_lofi_copies_at_hifi4():
    fn, shape = MOVES["permutation"]
    results, x = _compile(fn, shape, fidelity=MF.LoFi)
    assert results.notes["exact_pickers"] > 0
    assert torch.equal(create_executor(results).run([x])[0].reshape(fn(x).shape), fn(x))


def test_without_exact_data_movement_the_pickers_truncate_as_tt_budas():
    fn, shape = MOVES["slice_and_concatenate"]
    results, x = _compile(fn, shape, exact=False)
    assert results.notes["exact_pickers"] == 0
    assert not any(EXACT_PICKER_PART in op.tags for op in results.lowered_graph.ops.values())
    got = create_executor(results).run([x])[0].reshape(fn(x).shape)
    assert not torch.equal(got, fn(x))
    assert torch.allclose(got, fn(x), rtol=2.0 ** -9, atol=0)  # 9 mantissa bits kept


@pytest.mark.parametrize("device, df", [("wh_n150", None), ("wh_n150", DF.Float16_b), ("gs_e150", DF.Float32)],
                         ids=["default_formats", "float16_b", "grayskull_float32"])
def test_pickers_of_data_they_copy_whole_are_left_alone(device, df):
    # Float16_b data fits the source registers; Grayskull's Dest holds 19 bits (no Float32 accumulation).
    fn, shape = MOVES["slice_and_concatenate"]
    results, x = _compile(fn, shape, device, df)
    assert results.notes["exact_pickers"] == 0
    assert torch.allclose(create_executor(results).run([x])[0].reshape(fn(x).shape), fn(x), rtol=1e-2, atol=0)


def test_a_picker_that_only_a_matmul_reads_is_left_alone():
    # The matmul reads its operand with as few bits as the picker keeps: pieces would add ops for nothing.
    w = torch.randn(32, 16, generator=torch.Generator().manual_seed(1))
    results, x = _compile(lambda x: x[:, 5:17:2] @ w, (1, 40, 32))
    assert results.notes["exact_pickers"] == 0
    assert any(op.tags.get("picker") == "sparse" for op in results.lowered_graph.ops.values())


def test_the_pieces_replace_the_picker_under_its_name():
    fn, shape = MOVES["slice_and_concatenate"]
    bg = _compile(fn, shape)[0].lowered_graph
    parts = {}
    for op in bg.ops.values():
        if EXACT_PICKER_PART in op.tags:
            parts.setdefault(op.tags[EXACT_PICKER_PART], []).append(op)
    assert parts
    for picker, ops in parts.items():
        kinds = sorted(op.type for op in ops)
        # two multiply/subtract splits, three pickers sharing the constants, two adds (the last under the name)
        assert kinds == ["add", "add", "matmul", "matmul", "matmul", "multiply", "multiply", "subtract", "subtract"]
        assert bg.ops[picker].type == "add"
        picks = [op for op in ops if op.type == "matmul"]
        constants = {tuple(n for n in op.inputs if n in bg.queues and bg.queues[n].kind == "constant") for op in picks}
        assert len(constants) == 1 and all(constants)  # the three share the picker's constants
