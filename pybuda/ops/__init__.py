"""Op families. Importing this package registers every op in :mod:`pybuda.ops.registry`.

One module per family: eltwise (binary, unary, where), matmul, reduce, tm (tensor manipulations,
including the n-ary concatenate/stack/interleave), nn, conv, pool, misc, quant.
"""

from pybuda.ops import conv, eltwise, matmul, misc, nn, pool, quant, reduce, tm  # noqa: F401  (each registers its ops)
from pybuda.ops.registry import OpDef, all_ops, evaluate, get, has, infer, register  # noqa: F401
