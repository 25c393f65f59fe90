"""The training netlist decides which queues two programs can share from their host-I/O records alone
(shapes and host TMs as views of one buffer). Generated record pairs: the analytic answer equals the answer
found by passing distinct values through the host path (from_device_layout, to_device_layout)."""

import random

import pytest
import torch

from pybuda.netlist import training as tn
from pybuda.netlist.host_io import HostTM, QueueIO, to_device_layout

SIZES = (1, 3, 5, 32, 33)


def _apply(shape, tms):
    value = torch.zeros(shape)
    for tm in tms:
        value = value.reshape(tm.attrs["shape"]) if tm.op_type == "reshape" else \
            value.transpose(tm.attrs["dim0"], tm.attrs["dim1"])
    return tuple(value.shape)


def _chain(rng, shape):
    """0-2 host TMs (transposes of two of the last three dims, reshapes that merge or split dims)."""
    tms = []
    for _ in range(rng.randrange(3)):
        if rng.random() < 0.5 and len(shape) >= 2:
            d0, d1 = rng.sample(range(max(0, len(shape) - 3), len(shape)), 2)
            tms.append(HostTM("transpose", {"dim0": d0 - len(shape), "dim1": d1 - len(shape)}))
        elif len(shape) >= 3:
            tms.append(HostTM("reshape", {"shape": shape[:-2] + (shape[-2] * shape[-1],)}))
        else:
            tms.append(HostTM("reshape", {"shape": (1,) + shape}))
        shape = _apply(shape, tms[-1:])
    return tms, shape


def _device_shape(rng, shape):
    options = [shape, shape[:-2] + (shape[-2] * shape[-1],) if len(shape) >= 2 else shape, (1,) + shape]
    return rng.choice(options)


def _pair(seed):
    rng = random.Random(seed)
    batched = rng.random() < 0.6
    sample = (1,) + tuple(rng.choice(SIZES) for _ in range(rng.choice((2, 3))))
    out_device = sample
    out_tms, framework = _chain(rng, out_device)
    if rng.random() < 0.4:  # often the inverse path: the layouts then agree or are one transpose apart
        in_tms = [HostTM("transpose", dict(tm.attrs)) if tm.op_type == "transpose" else
                  HostTM("reshape", {"shape": before}) for tm, before in
                  reversed(list(zip(out_tms, [out_device] + [_apply(out_device, out_tms[:k + 1])
                                                              for k in range(len(out_tms))])))]
        in_shape = out_device
        if rng.random() < 0.5 and len(in_shape) >= 2:
            in_tms.append(HostTM("transpose", {"dim0": -1, "dim1": -2}))
            in_shape = _apply(in_shape, in_tms[-1:])
    else:
        in_tms, in_shape = _chain(rng, framework)
    out = QueueIO("out", "output", "y", framework_shape=framework, device_shape=out_device, batched=batched,
                  host_tms=out_tms)
    inp = QueueIO("in", "input", "x", framework_shape=framework, device_shape=_device_shape(rng, in_shape),
                  batched=batched, host_tms=in_tms)
    return out, inp, (2 if batched else 1)


def _names(tms):
    return None if tms is None else [tm.name for tm in tms]


@pytest.mark.parametrize("seed", range(150))
def test_output_to_input_matches_values(seed):
    out, inp, entries = _pair(seed)
    want = tn._output_to_input_on_values(out, inp, entries, None)
    assert _names(tn.output_to_input(out, inp, entries)) == _names(want), (out, inp)


@pytest.mark.parametrize("seed", range(100))
def test_ram_to_ram_matches_values(seed):
    rng = random.Random(seed)
    shape = tuple(rng.choice(SIZES) for _ in range(rng.choice((1, 2, 3))))
    recs = []
    for name in ("a", "b"):
        tms, held = _chain(rng, shape) if rng.random() < 0.6 else ([], shape)
        recs.append(QueueIO(name, "parameter", name, framework_shape=shape, device_shape=_device_shape(rng, held),
                            host_tms=tms))
    value = torch.rand(shape, generator=torch.Generator().manual_seed(seed)) + 0.5
    try:
        want = tn.layout_relation(to_device_layout(recs[0], value), to_device_layout(recs[1], value))
    except (RuntimeError, ValueError, IndexError):
        want = None
    assert _names(tn.ram_to_ram(recs[0], recs[1], shape)) == _names(want), recs


def test_a_gradient_reshaped_to_the_parameter():
    """A (1, out, in) per-sample weight gradient read as the optimizer's (out, in) gradient input."""
    grad = QueueIO("g", "output", "grad.w", framework_shape=(1, 40, 20), device_shape=(1, 40, 20), batched=True)
    plain = QueueIO("o", "input", "grad_in.w", framework_shape=(40, 20), device_shape=(40, 20))
    assert _names(tn.output_to_input(grad, plain, 1, (40, 20))) == []
    turned = QueueIO("o", "input", "grad_in.w", framework_shape=(40, 20), device_shape=(20, 40),
                     host_tms=[HostTM("transpose", {"dim0": -2, "dim1": -1})])
    assert _names(tn.output_to_input(grad, turned, 1, (40, 20))) == ["transpose"]
    flat = QueueIO("o", "input", "grad_in.w", framework_shape=(40, 20), device_shape=(800,))
    assert tn.output_to_input(grad, flat, 1, (40, 20)) is None


def test_a_gradient_in_the_backward_layout_round_trips():
    """to_gradient_layout undoes a backward output's host TMs: applying them again gives the gradient back."""
    from pybuda.netlist.host_io import apply_host_tms
    from pybuda.runtime.training_programs import _concrete_tms, to_gradient_layout

    tms = [HostTM("reshape", {"shape": (40, 24)}), HostTM("transpose", {"dim0": 0, "dim1": 1}),
           HostTM("reshape", {"shape": (-1, 24, 40)})]
    layout = ((1, 40, 24), _concrete_tms((1, 40, 24), tms))
    assert layout[1][-1] == ("reshape", {"shape": (1, 24, 40)})
    grad = torch.randn(24, 40, generator=torch.Generator().manual_seed(0))
    device = to_gradient_layout(grad, layout)
    assert tuple(device.shape) == (1, 40, 24)
    assert torch.equal(apply_host_tms(device, tms).reshape(24, 40), grad)
