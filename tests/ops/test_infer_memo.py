"""registry.infer inside memoized_inference answers exactly as without the memo (pybuda.passes.pipeline
runs every compile inside one)."""

import torch

from pybuda.ops import registry
from pybuda.ops.registry import _freeze, _thaw, infer, memoized_inference


def test_memoized_answers_equal_computed_ones():
    calls = [("add", [(1, 4, 32)] * 2, [torch.float32] * 2, {}),
             ("reshape", [(1, 4, 32)], [torch.float32], {"shape": (4, 32)}),
             ("reshape", [(1, 4, 32)], [torch.float32], {"shape": [4, 32]}),
             ("transpose", [(2, 4, 32)], [torch.bfloat16], {"dim0": -2, "dim1": -1})]
    plain = [infer(*c) for c in calls]
    with memoized_inference():
        first = [infer(*c) for c in calls]
        again = [infer(*c) for c in calls]
    assert first == plain and again == plain
    assert [type(a) for _, _, attrs in again for a in attrs.values()] == \
        [type(a) for _, _, attrs in plain for a in attrs.values()]


def test_memoized_attrs_are_fresh_containers():
    with memoized_inference():
        _, _, a = infer("reshape", [(1, 4, 32)], [torch.float32], {"shape": (4, 32)})
        _, _, b = infer("reshape", [(1, 4, 32)], [torch.float32], {"shape": (4, 32)})
    assert a == b and a is not b


def test_memo_lasts_one_block():
    def memo():
        return getattr(registry._INFER_STATE, "memo", None)

    assert memo() is None
    with memoized_inference():
        infer("add", [(1, 4, 32)] * 2, [torch.float32] * 2, {})
        assert len(memo()) == 1
        with memoized_inference():
            assert memo() == {}
        assert len(memo()) == 1
    assert memo() is None


def test_frozen_form_tells_apart_what_infer_might():
    values = [1, 1.0, True, -0.0, 0.0, (1, 2), [1, 2], {"a": 1}, None, "x", torch.float16, float("nan")]
    frozen = [_freeze(v) for v in values]
    assert len({f for f in frozen}) == len(values)
    for v, f in zip(values, frozen):
        back = _thaw(f)
        assert type(back) is type(v) and (back == v or v != v) and repr(back) == repr(v)
