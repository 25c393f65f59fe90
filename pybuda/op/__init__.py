"""``pybuda.op``: the user-facing op functions. Each records one registry op (see record.py).

Every function takes the op name first (``""`` auto-names it), then operands, then attributes, with
the signatures of TT-Buda's API reference.
"""

from pybuda.op.eltwise import *  # noqa: F401,F403
from pybuda.op.matmul import *  # noqa: F401,F403
