"""TensorFlow models to ONNX through tf2onnx (the maintained converter), for the ONNX importer.

- :func:`keras_to_onnx`: a ``keras.Model`` or a ``tf.Module`` with a traceable ``__call__``, traced with an
  input signature built from sample inputs (``tf2onnx.convert.from_function``);
- :func:`graph_def_to_onnx`: a frozen ``GraphDef`` with input and output tensor names
  (``tf2onnx.convert.from_graph_def``); sample shapes override the placeholders' unknown dims;
- :func:`tflite_to_onnx`: a ``.tflite`` flatbuffer (``tf2onnx.convert.from_tflite``).

Everything here imports TensorFlow lazily; a missing package is a ModuleError naming the ``tf`` extra.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import warnings
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import torch

from pybuda.errors import ModuleError

#: The ONNX opset the converted models use (the importer takes 13 and up).
DEFAULT_OPSET = 17

_INSTALL_HINT = 'pip install -e ".[tf]"'

#: TF 2.21's warning that ``tf.lite.Interpreter`` moves to LiteRT (``ai_edge_litert``); the interpreter still works.
TFLITE_INTERPRETER_DEPRECATION = r"\s*Warning: tf\.lite\.Interpreter is deprecated"


@contextlib.contextmanager
def quiet_tf2onnx():
    """tf2onnx's log below ERROR silenced for one conversion: it reports an optimizer that failed on a graph (and
    was skipped, leaving the graph as it was) as a WARNING with a full traceback, and its progress at INFO.
    Neither concerns the user: a conversion that fails raises, and ops it leaves unconverted are named by
    :func:`finish_conversion`."""
    log = logging.getLogger("tf2onnx")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


@contextlib.contextmanager
def traced_without_xla(tf: Any):
    """``tf.function(jit_compile=True)`` traced as a plain ``tf.function`` for one conversion. Keras' TensorFlow
    backend wraps grouped convolutions (``Conv2D(groups=g)``: ConvNeXt, RegNet, ResNeXt) in an XLA-compiled
    function because TensorFlow's CPU kernels lack them; tf2onnx keeps an XLA function as an opaque
    ``StatefulPartitionedCall`` it cannot convert, while the plain function is inlined and its grouped Conv2D
    converts to an ONNX Conv with ``group``. ``jit_compile`` only chooses how TensorFlow would execute the
    function, never what it computes; the model is traced here, not run."""
    original = tf.function

    def function(*args: Any, jit_compile: Any = None, **kwargs: Any) -> Any:
        return original(*args, **kwargs)

    tf.function = function
    try:
        yield
    finally:
        tf.function = original


def require_tensorflow(who: str = "the TensorFlow frontend"):
    """The ``tensorflow`` module, or a ModuleError saying which extra to install."""
    try:
        import tensorflow as tf
    except ImportError as e:
        raise ModuleError(f"{who} needs TensorFlow, which is not installed ({e}); install it with "
                          f"`{_INSTALL_HINT}` (tensorflow-cpu and tf2onnx)") from e
    return tf


def require_tf2onnx(who: str = "the TensorFlow frontend"):
    """The ``tf2onnx`` module (TensorFlow imported first), or a ModuleError naming the ``tf`` extra."""
    require_tensorflow(who)
    try:
        import tf2onnx
        import tf2onnx.convert  # noqa: F401
    except ImportError as e:
        raise ModuleError(f"{who} converts TensorFlow models to ONNX with tf2onnx, which is not installed ({e}); "
                          f"install it with `{_INSTALL_HINT}`") from e
    return tf2onnx


def to_numpy(value: Any) -> np.ndarray:
    """A sample or input (torch tensor, pybuda Tensor, numpy array, TF tensor, scalar) as a numpy array."""
    from pybuda.tensor import Tensor

    if isinstance(value, Tensor):
        value = value.value()
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):  # a TF eager tensor
        return np.asarray(value.numpy())
    return np.asarray(value)


def signature_key(samples: Sequence[Any]) -> tuple:
    """Hashable (shape, dtype) of each sample: one conversion per key."""
    arrays = [to_numpy(s) for s in samples]
    return tuple((tuple(int(d) for d in a.shape), str(a.dtype)) for a in arrays)


def input_signature(samples: Sequence[Any], names: Optional[Sequence[str]] = None) -> List[Any]:
    """``tf.TensorSpec`` per sample (its exact shape and dtype), named ``names[i]`` or ``input_<i>``."""
    tf = require_tensorflow()
    specs = []
    for i, s in enumerate(samples):
        a = to_numpy(s)
        name = names[i] if names is not None and i < len(names) else f"input_{i}"
        specs.append(tf.TensorSpec(tuple(int(d) for d in a.shape), tf.as_dtype(a.dtype), name=name))
    return specs


def is_keras(model: Any) -> bool:
    """Whether ``model`` is a Keras layer or model (Keras 3, or legacy tf_keras)."""
    return any(c.__module__.split(".")[0] in ("keras", "tf_keras") for c in type(model).__mro__)


def call_model(model: Any, xs: Sequence[Any], **kwargs: Any) -> Any:
    """Call a Keras model (inference mode unless ``training`` is given; several inputs as a list) or a
    ``tf.Module`` on TF values."""
    if is_keras(model):
        kwargs.setdefault("training", False)
        arg = xs[0] if len(xs) == 1 else list(xs)
        return model(arg, **kwargs)
    return model(*xs, **kwargs)


def keras_to_onnx(model: Any, samples: Sequence[Any], opset: int = DEFAULT_OPSET,
                  names: Optional[Sequence[str]] = None, who: str = "TFModule"):
    """Convert a Keras model or ``tf.Module`` to an ``onnx.ModelProto`` for the samples' shapes and dtypes."""
    tf = require_tensorflow(who)
    tf2onnx = require_tf2onnx(who)
    if not samples:
        raise ModuleError(f"{who}: converting a TensorFlow model needs sample inputs (their shapes and dtypes)")
    spec = input_signature(samples, names)

    @tf.function(input_signature=spec, autograph=False)
    def _forward(*xs):
        return call_model(model, xs)

    try:
        with quiet_tf2onnx(), traced_without_xla(tf):
            proto, _ = tf2onnx.convert.from_function(_forward, input_signature=spec, opset=opset)
    except Exception as e:  # tf2onnx raises bare exceptions on unconvertible graphs
        raise ModuleError(f"{who}: tf2onnx could not convert the TensorFlow model: {type(e).__name__}: {e}") from e
    _freeze_captured_tensors(proto, _forward.get_concrete_function())
    return finish_conversion(proto, who)


def _freeze_captured_tensors(proto: Any, concrete: Any) -> None:
    """Make the tensors the traced function captured by value (a Keras ``Normalization`` layer's mean and
    variance in EfficientNet) initializers of ``proto``: tf2onnx freezes variables but leaves such captures
    as graph inputs, so the model would take inputs its user never passes."""
    import tensorflow as tf
    from onnx import numpy_helper

    captured = {inner.name: outer for outer, inner in zip(concrete.captured_inputs, concrete.graph.internal_captures)
                if outer.dtype != tf.resource}
    for value_info in list(proto.graph.input):
        outer = captured.get(value_info.name)
        if outer is not None:
            proto.graph.initializer.append(numpy_helper.from_array(outer.numpy(), value_info.name))
            proto.graph.input.remove(value_info)


def tensor_name(name: str) -> str:
    """A GraphDef tensor name (``x`` -> ``x:0``)."""
    return name if ":" in name else f"{name}:0"


def load_graph_def(source: Any, who: str = "TFGraphDefModule"):
    """A ``tf.compat.v1.GraphDef`` from a GraphDef, its serialized bytes, or a ``.pb`` / ``.pbtxt`` path."""
    tf = require_tensorflow(who)
    graph_def_type = tf.compat.v1.GraphDef
    if isinstance(source, graph_def_type):
        return source
    if hasattr(source, "SerializeToString") and type(source).__name__ == "GraphDef":  # a GraphDef of another build
        out = graph_def_type()
        out.ParseFromString(source.SerializeToString())
        return out
    out = graph_def_type()
    if isinstance(source, (bytes, bytearray)):
        try:
            out.ParseFromString(bytes(source))
        except Exception as e:
            raise ModuleError(f"{who}: the bytes are not a serialized GraphDef ({e})") from e
        return out
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if not os.path.exists(path):
            raise ModuleError(f"{who}: GraphDef file '{path}' does not exist")
        with open(path, "rb") as f:
            data = f.read()
        try:
            if path.endswith((".pbtxt", ".txt")):
                from google.protobuf import text_format

                text_format.Merge(data.decode("utf-8"), out)
            else:
                out.ParseFromString(data)
        except Exception as e:
            raise ModuleError(f"{who}: '{path}' is not a GraphDef ({e})") from e
        return out
    raise ModuleError(f"{who}: expected a GraphDef, its bytes or a path to a .pb file, got {type(source).__name__}")


def graph_def_to_onnx(graph_def: Any, input_names: Sequence[str], output_names: Sequence[str],
                      samples: Sequence[Any] = (), opset: int = DEFAULT_OPSET, who: str = "TFGraphDefModule"):
    """Convert a frozen GraphDef to ONNX; the samples' shapes replace the placeholders' (unknown) dims."""
    tf2onnx = require_tf2onnx(who)
    inputs = [tensor_name(n) for n in input_names]
    outputs = [tensor_name(n) for n in output_names]
    override: Optional[Dict[str, List[int]]] = None
    if samples:
        if len(samples) != len(inputs):
            raise ModuleError(f"{who}: {len(inputs)} input name(s) {list(input_names)}, got {len(samples)} sample(s)")
        override = {n: [int(d) for d in to_numpy(s).shape] for n, s in zip(inputs, samples)}
    try:
        with quiet_tf2onnx():
            proto, _ = tf2onnx.convert.from_graph_def(graph_def, input_names=inputs, output_names=outputs,
                                                      opset=opset, shape_override=override)
    except Exception as e:
        raise ModuleError(f"{who}: tf2onnx could not convert the GraphDef: {type(e).__name__}: {e}") from e
    return finish_conversion(proto, who)


def tflite_to_onnx(content: bytes, opset: int = DEFAULT_OPSET, who: str = "TFLiteModule"):
    """Convert a TFLite flatbuffer to ONNX (tf2onnx reads it from a file, so the bytes go to a temp file)."""
    tf2onnx = require_tf2onnx(who)
    fd, path = tempfile.mkstemp(suffix=".tflite")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(content)
        with warnings.catch_warnings(), quiet_tf2onnx():  # tf2onnx reads the model through TF's deprecated tf.lite.Interpreter
            warnings.filterwarnings("ignore", message=TFLITE_INTERPRETER_DEPRECATION)
            proto, _ = tf2onnx.convert.from_tflite(path, opset=opset)
    except Exception as e:
        raise ModuleError(f"{who}: tf2onnx could not convert the TFLite model: {type(e).__name__}: {e}") from e
    finally:
        os.unlink(path)
    return finish_conversion(proto, who)


def finish_conversion(proto: Any, who: str) -> Any:
    """``proto`` as tf2onnx left it, with the TensorFlow ops it passes through unconverted that ONNX can
    express rewritten (``Erfc``, TF's exact GELU: ``1 - Erf``), and a ModuleError naming every op still not
    ONNX (the model would otherwise fail the ONNX checker on the first of them)."""
    import collections

    import onnx
    from onnx import helper, numpy_helper

    graph = proto.graph
    nodes = list(graph.node)
    if any(n.op_type == "Erfc" and n.domain in ("", "ai.onnx") for n in nodes):
        one = "pybuda.erfc.one"
        graph.initializer.append(numpy_helper.from_array(np.ones((), dtype=np.float32), one))
        rewritten = []
        for n in nodes:
            if n.op_type == "Erfc" and n.domain in ("", "ai.onnx"):
                erf = f"{n.output[0]}.erf"
                rewritten += [helper.make_node("Erf", [n.input[0]], [erf], name=f"{n.name}.erf"),
                              helper.make_node("Sub", [one, erf], list(n.output), name=n.name)]
            else:
                rewritten.append(n)
        del graph.node[:]
        graph.node.extend(rewritten)
    unknown = collections.Counter()
    example = {}
    for n in graph.node:
        if n.domain in ("", "ai.onnx") and not onnx.defs.has(n.op_type):
            unknown[n.op_type] += 1
            example.setdefault(n.op_type, n.name)
    if unknown:
        listed = ", ".join(f"{op} x{count} (e.g. '{example[op]}')" for op, count in unknown.most_common())
        raise ModuleError(f"{who}: tf2onnx left {sum(unknown.values())} TensorFlow op(s) it cannot convert to ONNX: "
                          f"{listed}. A (Stateful)PartitionedCall is a function TensorFlow compiles with XLA "
                          f"(jit_compile), which tf2onnx does not inline")
    return proto
