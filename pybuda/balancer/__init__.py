"""The balancer: legal op models per op and the policies that choose one (spec §4.4).

Entry points: :func:`legal_op_models` (every legal layout of one op) and :func:`balance` (one layout
per op under ``config.balancer_policy``). Cycle estimates come from :mod:`pybuda.perf.cost`.
"""

from pybuda.balancer.types import BalancerSolution, OpModel  # noqa: F401
from pybuda.balancer.edges import operand_stream, stream_compatible, stream_edge_tms  # noqa: F401
from pybuda.balancer.legalizer import Legalizer, legal_op_models  # noqa: F401
from pybuda.balancer.policies import balance, epoch_break_flags, normalize_policy  # noqa: F401
