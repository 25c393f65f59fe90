"""L1 of a sparse (identity) matmul whose activation is resident (prologue): the activation's own K rows by the
core's columns, not the output block. ViT-base's class-token concat gathers a 1-row parameter into 7 rows;
sized as the output block, its netlist failed validation although the balancer (which sizes it as the
activation) had fitted it."""

import copy
from pathlib import Path

from pybuda.netlist import parse_file
from pybuda.netlist.operands import _input_tiles

_BASE = parse_file(Path(__file__).parent / "fixtures" / "spec_example.yaml")


def _sparse_mm(m_k: int, u_kt: int, mblock, ublock, t: int = 1):
    op = copy.deepcopy(_BASE.graphs["fwd0"].ops["mm0"])
    op.attributes = {"identity": True, "m_k": m_k, "u_kt": u_kt, "num_sparse_tiles": 1, "num_index_tiles": 1,
                     "indices_len": 1, "act_t": t}
    op.mblock, op.ublock, op.t = tuple(mblock), tuple(ublock), t
    return op


def test_a_resident_sparse_activation_holds_its_k_rows_by_the_core_columns():
    op = _sparse_mm(m_k=1, u_kt=1, mblock=(7, 3), ublock=(1, 8))  # ViT: 1 row of 24 tiles -> 7 x 24 output
    assert _input_tiles(op, 1, prologue=True) == 1 * 24
    assert _input_tiles(op, 1, prologue=False) == 2 * 8  # streamed: two ublocks, as before
    deeper = _sparse_mm(m_k=7, u_kt=2, mblock=(2, 1), ublock=(1, 4), t=3)
    assert _input_tiles(deeper, 1, prologue=True) == 3 * 14 * 4
