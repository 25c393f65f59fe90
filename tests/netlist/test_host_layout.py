"""to_device_layout: the queue entries a framework tensor becomes, and that they never share memory with it."""

import pytest
import torch

from pybuda.netlist.host_io import QueueIO, to_canonical, to_device_layout


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
