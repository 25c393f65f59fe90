"""The ONNX op table (a package of converter families): one small converter per ONNX op type, emitting registry ops.

Converters reuse the torch frontend's builder helpers (matmul, convolution, permutations, reductions,
index ranges ...) so a decomposition lives in one place. A converter raises
:class:`~pybuda.frontend.aten_builder.Unsupported` for a call it cannot express (the node then falls back
to the CPU) and :class:`~pybuda.frontend.onnx.converter.OnnxAttributeError` (via ``ctx.bad``) for an
attribute value the ONNX op itself does not accept.
"""

from pybuda.frontend.onnx.ops import elementwise, nn, pool, recurrent, reduce, tensor  # noqa: F401  (registers the converters)
