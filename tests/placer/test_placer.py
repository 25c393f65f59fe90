"""Op placement: rectangles, epochs, breaks, chips, overrides and epoch-to-epoch queues."""

import pytest

from pybuda.arch import get_device_descriptor
from pybuda.balancer import balance
from pybuda.balancer.synthetic import bert_encoder_graph, chain_graph
from pybuda.config import CompilerConfig, OpOverride, PlacerOverride
from pybuda.errors import CompileError
from pybuda.ir.lowered import BudaGraph, BudaOp, BudaQueue, TileShape
from pybuda.placer import GridPacker, chip_order, count_epochs, place
from pybuda.placer.validate import validate_solution

GS = get_device_descriptor(device_config="gs_e150")  # 10x12
WH = get_device_descriptor(device_config="wh_n150")  # 9x8
N300 = get_device_descriptor(device_config="wh_n300")  # 2 chips of 8x8


def _chain(n, shape=(1, 12, 12)):
    return chain_graph([shape] * n)


def _run(g, device, grids=None, **cfg_kwargs):
    overrides = {name: OpOverride(grid_shape=grid) for name, grid in (grids or {}).items()}
    cfg = CompilerConfig(balancer_policy=cfg_kwargs.pop("balancer_policy", "MinimizeGrid"),
                         balancer_op_overrides=overrides, **cfg_kwargs)
    sol = balance(g, device, cfg)
    placement = place(g, sol, device, cfg)
    assert validate_solution(g, sol, placement, device, cfg) == []
    return sol, placement


def test_row_major_first_fit():
    g = _chain(5)
    grids = {"op0": (2, 4), "op1": (2, 4), "op2": (2, 4), "op3": (3, 2), "op4": (1, 1)}
    _, p = _run(g, GS, grids)
    locs = {n: p.op_placements[n].grid_loc for n in g.ops}
    assert locs == {"op0": (0, 0), "op1": (0, 4), "op2": (0, 8), "op3": (2, 0), "op4": (2, 2)}
    assert len(p.epochs) == 1 and p.epochs[0].ops == list(g.ops)


def test_new_epoch_when_full_and_holes_are_back_filled():
    g = _chain(4)
    grids = {"op0": (6, 12), "op1": (6, 6), "op2": (4, 6), "op3": (4, 6)}
    _, p = _run(g, GS, grids)
    epochs = [p.epoch_of(n) for n in g.ops]
    assert epochs == [0, 1, 1, 1]
    assert p.op_placements["op2"].grid_loc == (0, 6)
    assert p.op_placements["op3"].grid_loc == (4, 6)


def test_harvested_grid_is_respected():
    g = _chain(3, shape=(1, 9, 8))
    _, p = _run(g, WH, {"op0": (9, 4), "op1": (9, 4), "op2": (9, 4)})
    assert [p.epoch_of(n) for n in g.ops] == [0, 0, 1]
    assert all(r < 9 and c < 8 for pl in p.op_placements.values() for r, c in pl.cores())


def test_epoch_break_and_epoch_types():
    g = _chain(4)
    _, p = _run(g, GS, op_names_to_epoch_break=["op2"])
    assert [p.epoch_of(n) for n in g.ops] == [0, 0, 1, 1]
    g.ops["op3"].epoch_type = "bwd"
    _, p = _run(g, GS)
    assert [p.epoch_of(n) for n in g.ops] == [0, 0, 0, 1]
    assert p.epochs[1].epoch_type == "bwd"


def test_temporal_break_override_and_start_and_transpose():
    g = _chain(3)
    cfg_over = {"op1": PlacerOverride(temporal_epoch_break=True, start=(3, 4), transpose_op=True)}
    _, p = _run(g, GS, {"op1": (2, 3)}, placer_op_overrides=cfg_over)
    op1 = p.op_placements["op1"]
    assert op1.global_epoch == 1 and op1.grid_loc == (3, 4) and op1.transposed and op1.footprint == (3, 2)
    assert p.epoch_of("op2") == 1


def test_start_override_outside_grid_is_rejected():
    g = _chain(2)
    with pytest.raises(CompileError, match=r"op 'op1'.*outside"):
        _run(g, GS, {"op1": (2, 2)}, placer_op_overrides={"op1": PlacerOverride(start=(9, 0))})


def test_occupied_start_opens_a_new_epoch():
    g = _chain(2)
    _, p = _run(g, GS, {"op0": (2, 2), "op1": (2, 2)}, placer_op_overrides={"op1": PlacerOverride(start=(1, 1))})
    assert p.epoch_of("op1") == 1 and p.op_placements["op1"].grid_loc == (1, 1)


def test_auto_transpose_places_wide_ops_tall():
    g = _chain(1, shape=(1, 1, 9))  # 1x9 does not fit 8 columns, fits as 9x1
    cfg = dict(enable_auto_transposing_placement=True)
    _, p = _run(g, WH, {"op0": (1, 9)}, **cfg)
    assert p.op_placements["op0"].transposed and p.op_placements["op0"].footprint == (9, 1)


def test_chip_breaks_and_pipelining_on_two_chips():
    assert chip_order(2, "MMIO_LAST") == (1, 0)
    assert chip_order(2, "SNAKE") == (0, 1)
    assert chip_order(1, "MMIO_LAST") == (0,)
    g = _chain(4)
    _, p = _run(g, N300, num_chips=2, op_names_to_chip_break=["op2"])
    first, second = p.epochs
    assert (first.temporal_epoch, first.chip_id) == (0, 1)
    assert (second.temporal_epoch, second.chip_id) == (0, 0)  # same temporal epoch, next chip
    assert p.chip_of("op2") == 0
    _, snake = _run(g, N300, num_chips=2, op_names_to_chip_break=["op2"], chip_placement_policy="SNAKE")
    assert [e.chip_id for e in snake.epochs] == [0, 1]


def test_capacity_overflow_moves_to_next_chip_then_next_temporal_epoch():
    g = _chain(3, shape=(1, 8, 8))
    _, p = _run(g, N300, {n: (8, 8) for n in ("op0", "op1", "op2")}, num_chips=2)
    assert [(e.temporal_epoch, e.chip_id) for e in p.epochs] == [(0, 1), (0, 0), (1, 1)]


def test_chip_id_override():
    g = _chain(3)
    _, p = _run(g, N300, num_chips=2, placer_op_overrides={"op0": PlacerOverride(chip_id=0),
                                                           "op1": PlacerOverride(chip_id=1)})
    assert p.chip_of("op0") == 0 and p.chip_of("op1") == 1 and p.chip_of("op2") == 1
    assert p.epochs[1].temporal_epoch == 1  # chip 1 comes before chip 0 in MMIO_LAST order
    with pytest.raises(CompileError, match="chip_id=3"):
        _run(g, N300, num_chips=2, placer_op_overrides={"op0": PlacerOverride(chip_id=3)})


def test_spatial_break_is_a_chip_break():
    g = _chain(3)
    _, p = _run(g, N300, num_chips=2, placer_op_overrides={"op1": PlacerOverride(spatial_epoch_break=True)})
    assert [(e.temporal_epoch, e.chip_id) for e in p.epochs] == [(0, 1), (0, 0)]


# --- epoch-to-epoch queues ---------------------------------------------------------------------------

def _fork_graph():
    """in → a → b, a → c, b → c (c reads a and b), out ← c."""
    g = BudaGraph("fork")
    s = TileShape(1, 1, 2, 2)
    g.add_queue(BudaQueue("in", "input", s))
    g.add_op(BudaOp("a", "nop", ["in"], s))
    g.add_op(BudaOp("b", "exp", ["a"], s))
    g.add_op(BudaOp("c", "add", ["a", "b"], s))
    g.add_op(BudaOp("d", "nop", ["a"], s))
    g.add_queue(BudaQueue("out", "output", s, producer="c"))
    g.add_queue(BudaQueue("out2", "output", s, producer="d"))
    return g


def test_e2e_queues_for_crossing_edges():
    g = _fork_graph()
    _, p = _run(g, GS, op_names_to_epoch_break=["b", "d"])
    assert [p.epoch_of(n) for n in "abcd"] == [0, 1, 1, 2]
    assert p.epoch_to_epoch_queues == ["e2e_a_0"]
    q = p.e2e_queues["e2e_a_0"]
    assert q.producer == "a" and q.consumers == ("b", "c", "d") and q.consumer_epochs == (1, 2)
    assert q.entries == g.microbatch
    assert p.input_source("b", "a") == "e2e_a_0" and p.input_source("c", "b") == "b"
    qp = p.queue_placements["e2e_a_0"]
    assert qp.loc == "dram" and qp.lifetime == (0, 2)


def test_e2e_queue_per_consumer_chip():
    g = _fork_graph()
    _, p = _run(g, N300, num_chips=2, placer_op_overrides={"b": PlacerOverride(chip_id=0),
                                                           "d": PlacerOverride(temporal_epoch_break=True)})
    names = p.epoch_to_epoch_queues
    chips = {p.e2e_queues[n].chip_id for n in names if p.e2e_queues[n].producer == "a"}
    assert chips == {0, 1}
    assert {n for n in names if n.startswith("e2e_a_")} == {"e2e_a_0", "e2e_a_1"}


def test_packer_and_epoch_counter():
    packer = GridPacker(2, 3)
    assert packer.place(1, 2) == (0, 0, False)
    assert packer.place(2, 1) == (0, 2, False)
    assert packer.place(1, 2) == (1, 0, False)
    assert packer.place(1, 1) is None and packer.free == 0
    assert count_epochs([(2, 3), (1, 1), (1, 1)], [False, False, True], 2, 3) == [0, 1, 2]
    tp = GridPacker(3, 1)
    assert tp.place(1, 3, transpose=None) == (0, 0, True)



def _first_fit_by_scan(taken, rows, cols, h, w):
    """The first row-major position of an ``h × w`` rectangle among the free cells, by trying every one."""
    for r in range(rows - h + 1):
        for c in range(cols - w + 1):
            if not any((r + i, c + j) in taken for i in range(h) for j in range(w)):
                return r, c
    return None


@pytest.mark.parametrize("rows,cols", [(10, 12), (8, 8), (1, 5), (7, 1), (3, 13)])
def test_packer_first_fit_matches_a_cell_by_cell_scan(rows, cols):
    """GridPacker's bit-parallel first fit places every rectangle where scanning the free cells in row-major
    order would, including back-filled holes and rectangles that no longer fit; and fits_at agrees."""
    import random

    rng = random.Random(rows * 100 + cols)
    for _ in range(40):
        packer, taken = GridPacker(rows, cols), set()
        for _ in range(rng.randrange(1, 30)):
            h, w = rng.randint(1, rows), rng.randint(1, cols)
            if rng.random() < 0.6:  # mostly small ops, so grids fill up and holes appear
                h, w = rng.randint(1, max(1, rows // 3)), rng.randint(1, max(1, cols // 3))
            expected = _first_fit_by_scan(taken, rows, cols, h, w)
            r0, c0 = rng.randrange(rows), rng.randrange(cols)
            assert packer.fits_at(r0, c0, h, w) == (
                r0 + h <= rows and c0 + w <= cols and
                not any((r0 + i, c0 + j) in taken for i in range(h) for j in range(w)))
            got = packer.place(h, w)
            assert (got[:2] if got else None) == expected
            if expected is not None:
                taken |= {(expected[0] + i, expected[1] + j) for i in range(h) for j in range(w)}
            assert packer.free == rows * cols - len(taken)


def test_packers_sharing_a_placement_memo_place_as_packers_without_one():
    """GridPacker's memo answers a placement it has seen on the same occupancy: every spot, the free count
    and count_epochs stay what a packer without a memo computes, with pinned starts and transposes too."""
    import random

    rng = random.Random(7)
    memo = {}
    for _ in range(200):
        plain, shared = GridPacker(4, 5), GridPacker(4, 5, memo)
        for _ in range(rng.randrange(1, 12)):
            h, w = rng.randint(1, 4), rng.randint(1, 3)
            start = (rng.randrange(4), rng.randrange(5)) if rng.random() < 0.2 else None
            transpose = rng.choice([False, False, None, True])
            assert shared.place(h, w, start=start, transpose=transpose) == \
                plain.place(h, w, start=start, transpose=transpose)
            assert (shared.free, shared.occupied) == (plain.free, plain.occupied)
        shapes = [(rng.randint(1, 4), rng.randint(1, 5)) for _ in range(10)]
        breaks = [rng.random() < 0.1 for _ in shapes]
        assert count_epochs(shapes, breaks, 4, 5, memo=memo) == count_epochs(shapes, breaks, 4, 5)
    assert memo  # the memo was used

def test_bert_placement_is_valid_on_every_device():
    g = bert_encoder_graph(layers=2, seq_tiles=4, hidden_tiles=8, heads=4, microbatch=4)
    for device in (GS, WH):
        cfg = CompilerConfig()
        sol = balance(g, device, cfg)
        p = place(g, sol, device, cfg)
        assert validate_solution(g, sol, p, device, cfg) == []
        assert sum(len(e.ops) for e in p.epochs) == len(g.ops)


def test_validator_catches_overlaps_and_bad_order():
    import dataclasses

    g = _chain(3)
    sol, p = _run(g, GS, {"op0": (2, 2), "op1": (2, 2), "op2": (2, 2)})
    bad = dataclasses.replace(p.op_placements["op1"], grid_loc=(1, 1))
    p.op_placements["op1"] = bad
    problems = validate_solution(g, sol, p, GS, CompilerConfig())
    assert any("already used by op0" in msg for msg in problems)
    # two static queues on top of each other
    q_in = p.queue_placements["w0"] if "w0" in p.queue_placements else p.queue_placements["in0"]
    clash = dataclasses.replace(p.queue_placements["out0"], loc="dram", dram=q_in.dram, host=())
    p.queue_placements["out0"] = clash
    from pybuda.placer.validate import validate_queues
    assert any("overlap" in msg for msg in validate_queues(g, p, GS))


def test_harvested_grayskull_rows():
    device = get_device_descriptor("grayskull", harvesting_mask=0b11)  # two worker rows removed
    assert device.grid_size == (8, 12)
    g = bert_encoder_graph(layers=1, seq_tiles=4, hidden_tiles=8, heads=4)
    for policy in ("NLP", "Ribbon", "Random"):
        cfg = CompilerConfig(balancer_policy=policy)
        sol = balance(g, device, cfg)
        p = place(g, sol, device, cfg)
        assert validate_solution(g, sol, p, device, cfg) == []
        assert all(r < 8 for pl in p.op_placements.values() for r, _ in pl.cores())
