"""The NLP policy's fill pass (pybuda.balancer.fill_streaming): t-streaming an epoch's chains shortens
the first input's way through it without changing grids, epochs or the steady state."""

from pybuda.arch import get_device_descriptor
from pybuda.balancer import balance, policies
from pybuda.balancer.fill_streaming import _epoch_cost, stream_for_fill
from pybuda.balancer.legalizer import Legalizer
from pybuda.balancer.packing import count_epochs
from pybuda.balancer.synthetic import bert_encoder_graph
from pybuda.config import CompilerConfig
from pybuda.placer import place
from pybuda.placer.validate import validate_solution

N150 = get_device_descriptor(device_config="wh_n150")


def _unstreamed_solution(cfg):
    g = bert_encoder_graph(layers=2)
    ctx = policies._Context(g, N150, cfg, Legalizer(g, N150, cfg))
    targets = policies._Targets(ctx)
    target, rows = policies.global_target(ctx, targets, policies._whole_score)
    models = policies.assign_for_target(ctx, targets, target, rows)
    epoch_of = count_epochs([m.grid_shape for m in models], ctx.breaks, ctx.rows, ctx.cols,
                            ctx.allow_transpose, ctx.placements)
    return ctx, models, epoch_of


def test_streaming_for_fill_keeps_grids_and_never_costs_more():
    ctx, models, epoch_of = _unstreamed_solution(CompilerConfig())
    streamed = stream_for_fill(ctx, models, epoch_of)
    assert [m.grid_shape for m in streamed] == [m.grid_shape for m in models]
    changed = [ctx.ops[i].name for i, (a, b) in enumerate(zip(models, streamed)) if a is not b]
    assert any(".ln" in name and name.endswith((".sub", ".norm")) for name in changed), changed  # layer norms stream
    for e in set(epoch_of):
        ops = [i for i, x in enumerate(epoch_of) if x == e]
        assert _epoch_cost(ctx, ops, streamed) <= _epoch_cost(ctx, ops, models)
        assert max(streamed[i].cycles for i in ops) <= max(models[i].cycles for i in ops)
    # every edge still connects
    for i in range(len(ctx.ops)):
        assert ctx.compatible(i, streamed[i], streamed)
    assert policies._whole_score(ctx, streamed)[0] < policies._whole_score(ctx, models)[0]


def test_without_t_streaming_nothing_changes():
    cfg = CompilerConfig(enable_t_streaming=False)
    ctx, models, epoch_of = _unstreamed_solution(cfg)
    assert stream_for_fill(ctx, models, epoch_of) == models


def test_nlp_placement_with_streamed_chains_is_valid():
    g = bert_encoder_graph(layers=2)
    cfg = CompilerConfig()
    sol = balance(g, N150, cfg)
    assert any(m.t_stream_factor != (1, 1) for name, m in sol.op_models.items() if ".ln" in name)
    placement = place(g, sol, N150, cfg)
    assert validate_solution(g, sol, placement, N150, cfg) == []
