"""to_device_layout: the queue entries a framework tensor becomes, and that they never share memory with it."""

import pytest
import torch

from pybuda.netlist.host_io import QueueIO, compact_shape, to_canonical, to_device_layout
from pybuda.netlist.training import read_ram_value


def _reference(rec: QueueIO, value: torch.Tensor) -> torch.Tensor:
    """The layout as a stack of every entry's canonical form (what to_device_layout computes)."""
    shape = rec.device_shape or tuple(value.shape[1:] if rec.batched else value.shape)
    samples = [value[i:i + 1].reshape(shape) for i in range(value.shape[0])] if rec.batched \
        else [value.reshape(shape)]
    return torch.stack([to_canonical(s) for s in samples])


@pytest.mark.parametrize("make", [
    lambda: torch.randn(64, 96),  # tile-aligned and contiguous: the canonical form is a view
    lambda: torch.randn(96, 64).t(),  # a transposed weight view (consteval)
    lambda: torch.randn(5, 70),  # padded to tiles
    lambda: torch.randn(2, 3, 32, 32),  # leading dims folded into z
])
def test_a_ram_entry_is_the_canonical_form_in_its_own_memory(make):
    value = make()
    rec = QueueIO("q", "parameter", "q", framework_shape=tuple(value.shape))
    entry = to_device_layout(rec, value)
    assert torch.equal(entry, _reference(rec, value)) and entry.shape[0] == 1
    before = value.clone()
    entry.add_(1.0)  # the device's copy changing leaves the framework tensor alone, and the other way round
    assert torch.equal(value, before)


def test_batched_inputs_become_one_entry_per_sample():
    value = torch.randn(3, 40, 33)
    rec = QueueIO("q", "input", "x", framework_shape=(40, 33), device_shape=(40, 33), batched=True)
    entries = to_device_layout(rec, value)
    assert entries.shape == (3, 1, 64, 64) and torch.equal(entries, _reference(rec, value))


@pytest.mark.parametrize("shape,compact", [
    ((1280, 80, 1, 1), (1280, 80)),  # a pointwise conv weight: 102,400 one-datum tiles canonical, 120 compact
    ((512, 512, 3, 3), (512, 4608)),  # a 3x3 conv weight: 262,144 slices, past the netlist's limit on t
    ((64, 1, 3, 3), (64, 9)),  # depthwise
    ((1, 128, 768), None),  # an embedding table: canonical is already dense
    ((12, 64, 64), None),  # per-head matrices: each fills whole tiles
    ((768, 768), None),  # rank 2 is canonical
])
def test_compact_shape_takes_weights_whose_canonical_form_is_mostly_padding(shape, compact):
    assert compact_shape(shape) == compact
    if compact is not None:  # a reshape: a queue holding it round-trips the framework tensor
        value = torch.randn(shape)
        rec = QueueIO("q", "parameter", "q", framework_shape=shape, device_shape=compact)
        entry = to_device_layout(rec, value)
        assert entry.shape[1] == 1 and torch.equal(read_ram_value(rec, entry[0], shape), value)
