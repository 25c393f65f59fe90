"""``pybuda.op``: the user-facing op functions. Each records one registry op (see record.py).

Every function takes the op name first (``""`` auto-names it), then operands, then attributes, with
the signatures of TT-Buda's API reference. Layer modules live in ``pybuda.op.nn`` and loss modules in
``pybuda.op.loss``.
"""

from pybuda.op.conv import *  # noqa: F401,F403
from pybuda.op.eltwise import *  # noqa: F401,F403
from pybuda.op.matmul import *  # noqa: F401,F403
from pybuda.op.misc import *  # noqa: F401,F403
from pybuda.op.pool import *  # noqa: F401,F403
from pybuda.op.quant import *  # noqa: F401,F403
from pybuda.op.reduce import *  # noqa: F401,F403
from pybuda.op.tm import *  # noqa: F401,F403
from pybuda.op.nn import Batchnorm, Layernorm, LogSoftmax, Softmax  # noqa: F401
from pybuda.op import loss, nn  # noqa: F401  (pybuda.op.nn.Linear, pybuda.op.loss.L1Loss, ...)
