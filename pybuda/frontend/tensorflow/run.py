"""Running TensorFlow-family models in their own framework (what a CPUDevice runs); outputs are torch tensors."""

from __future__ import annotations

import warnings
from typing import Any, List, Sequence, Tuple

import numpy as np
import torch

from pybuda.errors import InputError
from pybuda.frontend.tensorflow.convert import (
    TFLITE_INTERPRETER_DEPRECATION, call_model, require_tensorflow, tensor_name, to_numpy,
)


def to_torch(value: Any) -> torch.Tensor:
    """A TF tensor or numpy array as a torch tensor (a copy)."""
    a = value.numpy() if hasattr(value, "numpy") and not isinstance(value, np.ndarray) else value
    return torch.from_numpy(np.array(a, copy=True))


def to_tf(value: Any, who: str = "Tensor.to_framework('tensorflow')"):
    """A torch tensor, pybuda Tensor or numpy array as a TensorFlow eager tensor (``tf.Tensor``)."""
    tf = require_tensorflow(who)
    return tf.convert_to_tensor(to_numpy(value))


def run_model(model: Any, inputs: Sequence[Any], who: str = "TFModule", **kwargs: Any) -> Tuple[torch.Tensor, ...]:
    """Call a Keras model (``training=False`` unless given) or a ``tf.Module`` (``kwargs`` go to the call);
    the flattened outputs as torch tensors."""
    tf = require_tensorflow(who)
    xs = [tf.convert_to_tensor(to_numpy(x)) for x in inputs]
    out = call_model(model, xs, **kwargs)
    return tuple(to_torch(t) for t in tf.nest.flatten(out))


class GraphDefRunner:
    """A frozen GraphDef as a TF2 function pruned to its inputs and outputs (``tf.compat.v1.wrap_function``)."""

    def __init__(self, graph_def: Any, input_names: Sequence[str], output_names: Sequence[str],
                 who: str = "TFGraphDefModule"):
        tf = require_tensorflow(who)
        self.who = who
        self.input_names = [tensor_name(n) for n in input_names]
        self.output_names = [tensor_name(n) for n in output_names]

        def _import():
            tf.compat.v1.import_graph_def(graph_def, name="")

        wrapped = tf.compat.v1.wrap_function(_import, [])
        try:
            feeds = [wrapped.graph.as_graph_element(n) for n in self.input_names]
            fetches = [wrapped.graph.as_graph_element(n) for n in self.output_names]
        except (KeyError, ValueError) as e:
            raise InputError(f"{who}: {e}") from e
        self.fn = wrapped.prune(feeds, fetches)
        self.dtypes = [f.dtype for f in feeds]

    def __call__(self, *inputs: Any) -> Tuple[torch.Tensor, ...]:
        tf = require_tensorflow(self.who)
        if len(inputs) != len(self.input_names):
            raise InputError(f"{self.who} takes {len(self.input_names)} input(s) {self.input_names}, "
                             f"got {len(inputs)}")
        xs = [tf.convert_to_tensor(to_numpy(x), dtype=dt) for x, dt in zip(inputs, self.dtypes)]
        return tuple(to_torch(t) for t in self.fn(*xs))


def _interpreter(content: bytes, who: str):
    """A TFLite interpreter: LiteRT's (``ai_edge_litert``) where installed, else ``tf.lite.Interpreter`` (TF 2.21
    still ships it, with a deprecation warning in favour of LiteRT, which is silenced here)."""
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        tf = require_tensorflow(who)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=TFLITE_INTERPRETER_DEPRECATION)
            return tf.lite.Interpreter(model_content=content)
    return Interpreter(model_content=content)


class TFLiteRunner:
    """A TFLite model in ``tf.lite.Interpreter``; inputs of a new shape resize the interpreter's inputs."""

    def __init__(self, content: bytes, who: str = "TFLiteModule"):
        self.who = who
        self.interpreter = _interpreter(content, who)
        self.interpreter.allocate_tensors()

    def input_details(self) -> List[dict]:
        return self.interpreter.get_input_details()

    def __call__(self, *inputs: Any) -> Tuple[torch.Tensor, ...]:
        it = self.interpreter
        details = it.get_input_details()
        if len(inputs) != len(details):
            raise InputError(f"{self.who} takes {len(details)} input(s) {[d['name'] for d in details]}, "
                             f"got {len(inputs)}")
        arrays = [to_numpy(x).astype(d["dtype"], copy=False) for x, d in zip(inputs, details)]
        resized = False
        for a, d in zip(arrays, details):
            if tuple(a.shape) != tuple(int(s) for s in d["shape"]):
                it.resize_tensor_input(d["index"], list(a.shape))
                resized = True
        if resized:
            it.allocate_tensors()
        for a, d in zip(arrays, details):
            it.set_tensor(d["index"], np.ascontiguousarray(a))
        it.invoke()
        return tuple(to_torch(it.get_tensor(d["index"])) for d in it.get_output_details())
