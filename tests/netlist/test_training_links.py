"""The layout checks that decide which queues of a training netlist programs may share
(:mod:`pybuda.netlist.training`): a link is made only where the host would hand the tensor on unchanged,
or with one tile transpose."""

import torch

from pybuda.netlist.host_io import HostTM, QueueIO
from pybuda.netlist.training import layout_relation, output_to_input, plain_ram, ram_to_ram, read_ram_value


def test_layout_relation_finds_identity_and_transpose_only():
    held = torch.rand(2, 1, 32, 64)
    assert layout_relation(held, held.clone()) == ()
    (tm,) = layout_relation(held, held.transpose(-1, -2).contiguous())
    assert tm.name == "transpose"
    assert layout_relation(held, held * 2) is None
    assert layout_relation(held, held.reshape(2, 1, 64, 32)) is None


def test_saved_activation_read_transposed_by_the_backward():
    # The forward writes (3, 40) per sample; the backward's input took a host transpose to (40, 3).
    out = QueueIO(queue="saved.h", kind="output", name="saved.h", framework_shape=(1, 3, 40),
                  device_shape=(1, 3, 40), batched=True)
    same = QueueIO(queue="h", kind="input", name="h", framework_shape=(1, 3, 40), device_shape=(1, 3, 40),
                   batched=True)
    turned = QueueIO(queue="h", kind="input", name="h", framework_shape=(1, 3, 40), device_shape=(1, 40, 3),
                     batched=True, host_tms=[HostTM("transpose", {"dim0": 1, "dim1": 2})])
    assert output_to_input(out, same, entries=4) == ()
    assert [tm.name for tm in output_to_input(out, turned, entries=4)] == ["transpose"]
    # A host reshape that moves data across rows has no device equivalent here: no link.
    mixed = QueueIO(queue="h", kind="input", name="h", framework_shape=(1, 3, 40), device_shape=(1, 6, 20),
                    batched=True, host_tms=[HostTM("reshape", {"shape": (-1, 6, 20)})])
    assert output_to_input(out, mixed, entries=4) is None


def test_parameter_rams_and_read_back():
    w = QueueIO(queue="w", kind="parameter", name="w", framework_shape=(20, 40), device_shape=(20, 40), tensor="w")
    wt = QueueIO(queue="w", kind="parameter", name="w", framework_shape=(20, 40), device_shape=(40, 20), tensor="w",
                 host_tms=[HostTM("transpose", {"dim0": 0, "dim1": 1})])
    assert ram_to_ram(w, w, (20, 40)) == ()
    assert [tm.name for tm in ram_to_ram(w, wt, (20, 40))] == ["transpose"]
    assert plain_ram(w, (20, 40)) and not plain_ram(wt, (20, 40))
    value = torch.randn(20, 40)
    entry = torch.zeros(1, 32, 64)
    entry[0, :20, :40] = value
    assert torch.equal(read_ram_value(w, entry, (20, 40)), value)
