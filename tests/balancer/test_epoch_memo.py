"""NLP's per-epoch options are shared between windows that read the same ops (segment._WindowMemo)."""

import pytest

from pybuda.arch import get_device_descriptor
from pybuda.balancer import policies, segment
from pybuda.balancer.legalizer import Legalizer
from pybuda.balancer.synthetic import bert_encoder_graph
from pybuda.config import CompilerConfig

E150 = get_device_descriptor(device_config="gs_e150")


@pytest.mark.parametrize("layers,break_every", [(2, None), (4, None), (3, 10)])
def test_shared_epoch_options_equal_options_computed_alone(layers, break_every):
    """Every start's options from the shared memo are what a fresh computation gives, including the last
    layers' windows, which the end of the graph cuts short and which share answers with earlier ones, and
    windows cut short by epoch breaks (every ``break_every`` ops)."""
    g = bert_encoder_graph(layers=layers)
    cfg = CompilerConfig()
    ctx = policies._Context(g, E150, cfg, Legalizer(g, E150, cfg))
    if break_every:
        ctx.breaks = [i > 0 and i % break_every == 0 for i in range(len(ctx.ops))]
    targets = policies._Targets(ctx)
    ladder = [int(1000 * 1.15 ** k) for k in range(30)]
    alone = [segment._epoch_options(ctx, targets, i, ladder, segment._WindowMemo()) for i in range(len(ctx.ops))]
    for order in (range(len(ctx.ops)), range(len(ctx.ops) - 1, -1, -1)):  # the short windows first, too
        memo = segment._WindowMemo()
        shared = {i: segment._epoch_options(ctx, targets, i, ladder, memo) for i in order}
        assert [shared[i] for i in range(len(ctx.ops))] == alone
        assert len(memo.options) < len(ctx.ops)  # some answers were shared
