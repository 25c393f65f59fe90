"""Op families. Importing this package registers every op in :mod:`pybuda.ops.registry`."""

from pybuda.ops import eltwise, matmul  # noqa: F401  (each module registers its ops)
from pybuda.ops.registry import OpDef, all_ops, evaluate, get, has, infer, register  # noqa: F401
