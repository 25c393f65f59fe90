"""Which ONNX models are *registry-mappable*: the subset that must run wholly on the device.

The rule (:func:`device_mappable`), applied to a model with its sample inputs exactly as the backend
imports it (integer inputs and static operands specialised as constants, function ops without a converter
expanded into their ONNX bodies, import-time folding of values known at import):

1. **op types**: every node that is not folded at import time is a default-domain (``ai.onnx``) node whose
   op type has a converter in the importer's table (:data:`pybuda.frontend.onnx.importer.CONVERTERS`);
2. **values**: every value such a node reads or writes (apart from values known at import time) is device
   data by the importer's own test for values crossing the device boundary (``_Importer._cannot_cross``): a
   float, integer or boolean element type that torch and the chip's formats hold (not strings, bfloat16,
   float8, int4, unsigned 16/32/64-bit), a static non-empty shape, and integers within Float32's exact range
   (+-2**24);
3. **determinism**: no such node draws random numbers without a ``seed`` (an unseeded RandomNormal or
   Bernoulli, a training-mode Dropout with a non-zero ratio): its outputs are a new draw on every run, so no
   fixed result is right for the device to compute. A seeded draw is a constant of the node in ONNX's
   reference runtime (a generator seeded afresh on every run), which pybuda takes as its definition;
4. the model itself is importable (tensor inputs and outputs, an ``ai.onnx`` opset:
   :func:`pybuda.frontend.onnx.backend.host_only_reason`), and its graph inputs (but those specialised as
   constants) and outputs are device data by the same test, and no float16 input holds an infinity (the chip's
   Float16 has none, and its stand-in is a float16 number: the backend runs such a call on the host).

A mappable model may still have host nodes (a converter that cannot express the node's attributes, an op
the chip cannot run, a compile error): those are the importer's gaps that ``tools/onnx_backend_report.py``
lists with their reasons.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from pybuda.frontend.onnx import model as onnx_model


def device_mappable(model: "onnx_model.onnx.ModelProto", inputs: Sequence[Any], config: Any = None) -> Optional[str]:
    """None when ``model`` run on ``inputs`` is registry-mappable (see the module docstring); otherwise the
    first reason it is not, naming the node or value."""
    from pybuda.frontend.onnx import ops  # noqa: F401  (registers the converters)
    from pybuda.frontend.onnx.backend import float32_config, host_only_reason, specialised_inputs
    from pybuda.frontend.onnx.functions import expand_functions
    from pybuda.frontend.onnx.converter import CONVERTERS
    from pybuda.frontend.onnx.importer import _Importer

    why = host_only_reason(model)
    if why is not None:
        return f"not importable: {why}"
    name = model.graph.name or "onnx_model"
    model = onnx_model.check_and_upgrade(model, name)
    arrays = [np.asarray(a) for a in inputs]
    if any(a.dtype == np.float16 and np.isinf(a).any() for a in arrays):
        return "a float16 input holds an infinity, which the chip's Float16 cannot hold"
    bound = onnx_model.bind_inputs(model, arrays, name)
    bound = expand_functions(bound, CONVERTERS)
    cfg = copy.deepcopy(float32_config(config))
    cfg.enable_tvm_cpu_fallback = True  # the walk must finish; which nodes fall back is not the question here
    cfg.cpu_fallback_ops = []
    imp = _Importer(bound, arrays, name, cfg, False, set(specialised_inputs(model, arrays)))
    try:
        imp.run()
    except Exception:  # noqa: BLE001 - the walk (which sets what folded) is done before any split error
        pass
    bound_names = set(specialised_inputs(model, arrays))
    for v in [vi.name for vi in imp.inputs if vi.name not in bound_names] + [o.name for o in bound.graph.output]:
        if v not in imp.const_values:
            why = imp._cannot_cross(v)
            if why is not None:
                return f"graph input/output: {why}"
    for i, node in enumerate(imp.nodes):
        if i in imp.folded:
            continue
        where = f"{node.op_type} (node '{imp.labels[i]}')"
        if node.domain not in ("", "ai.onnx"):
            return f"{where} is in domain '{node.domain}', which has no converters"
        if node.op_type not in CONVERTERS:
            return f"{where} has no converter"
        if draws_unseeded(node, imp.samples_run):
            return f"{where} draws random numbers without a seed (a new result every run)"
        for v in list(node.input) + list(node.output):
            if v and v not in imp.const_values:
                why = imp._cannot_cross(v)
                if why is not None:
                    return f"{where}: {why}"
    return None


def draws_unseeded(node: "onnx_model.onnx.NodeProto", samples: Mapping[str, Any]) -> bool:
    """True when ``node`` draws random numbers (:func:`draws_random`) without a ``seed`` attribute."""
    return draws_random(node, samples) and not any(a.name == "seed" for a in node.attribute)


def draws_random(node: "onnx_model.onnx.NodeProto", samples: Mapping[str, Any]) -> bool:
    """True when ``node`` draws random numbers. A Dropout draws only in training mode with a non-zero ratio
    (read from ``samples``, values by name; a value it lacks counts as drawing)."""
    from pybuda.frontend.onnx.stages import RANDOM_OPS

    if node.op_type not in RANDOM_OPS:
        return False
    if node.op_type != "Dropout":
        return True
    names = list(node.input) + [""] * 3
    if not names[2]:
        return False  # no training_mode: inference mode, an identity
    training = samples.get(names[2])
    if training is not None and not bool(np.asarray(training).reshape(-1)[0]):
        return False
    ratio = samples.get(names[1]) if names[1] else 0.5
    return ratio is None or float(np.asarray(ratio).reshape(-1)[0]) != 0.0
