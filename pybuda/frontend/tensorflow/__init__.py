"""The TensorFlow family (Keras / ``tf.Module``, frozen GraphDef, TFLite) through the ONNX importer.

Each model is converted to ONNX by tf2onnx (:mod:`.convert`) and then imported onto pybuda's op registry by
:func:`pybuda.frontend.onnx.import_model` — one importer, with its CPU fallback per ONNX node and its fallback
report. :mod:`.run` runs the models in their own framework (what a ``CPUDevice`` runs); :func:`to_tf` converts a
tensor for ``Tensor.to_framework("tensorflow")``.

TensorFlow is imported only when one of these functions is called (``import pybuda`` stays fast); a missing
TensorFlow or tf2onnx is a :class:`pybuda.errors.ModuleError` naming the extra to install
(``pip install -e ".[tf]"``).

Note: this package is ``pybuda.frontend.tensorflow``; its modules import the real TensorFlow absolutely
(``import tensorflow``), which Python 3 resolves to the top-level package, never to this one.
"""

from pybuda.frontend.tensorflow.convert import (  # noqa: F401
    DEFAULT_OPSET, graph_def_to_onnx, input_signature, keras_to_onnx, load_graph_def, require_tensorflow,
    require_tf2onnx, tflite_to_onnx,
)
from pybuda.frontend.tensorflow.run import GraphDefRunner, TFLiteRunner, run_model, to_tf  # noqa: F401

__all__ = ["DEFAULT_OPSET", "require_tensorflow", "require_tf2onnx", "input_signature", "keras_to_onnx",
           "graph_def_to_onnx", "load_graph_def", "tflite_to_onnx", "run_model", "GraphDefRunner", "TFLiteRunner",
           "to_tf"]
