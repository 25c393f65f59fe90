"""The ONNX frontend: an ONNX model onto pybuda registry ops, with CPU fallback by ONNX node.

- :func:`import_model` (:mod:`.importer`) returns an :class:`OnnxCapture` (device graph, fallback report,
  CPU pre/post stages run by ONNX Runtime);
- :mod:`.ops` is the table of ONNX op converters (:func:`mapped_op_types` lists them; :mod:`.converter` is
  what a converter is handed); function ops without
  one are expanded into their ONNX function bodies first (:mod:`.functions`);
- :mod:`.coverage` says which models are registry-mappable (must run wholly on the device);
- :mod:`.backend` implements ``onnx.backend.base.Backend`` on the golden device.

Needs the ``onnx`` and ``onnxruntime`` packages (``pip install 'pybuda[onnx]'``).
"""

from pybuda.frontend.onnx.converter import CONVERTERS, NodeCtx, OnnxAttributeError, mapped_op_types  # noqa: F401
from pybuda.frontend.onnx.importer import OnnxCapture, import_model  # noqa: F401
from pybuda.frontend.onnx.stages import OnnxStage  # noqa: F401

__all__ = ["import_model", "mapped_op_types", "OnnxCapture", "OnnxStage", "OnnxAttributeError", "CONVERTERS",
           "NodeCtx"]
