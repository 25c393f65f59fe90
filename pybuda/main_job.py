"""``pybuda run`` / ``make run``: the main job on the embedded default model.

Until the simulated chip is in place, this traces the seed BudaMatmul module and a small MLP, runs
them through the CPU reference of the op registry and checks the result against PyTorch.
"""

from __future__ import annotations

import argparse
import time

import torch


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=0, help="random seed for weights and inputs")


def main(args: argparse.Namespace) -> int:
    import pybuda
    from pybuda.verify import calculate_pcc, run_graph_on_cpu

    torch.manual_seed(args.seed)

    class BudaMatmul(pybuda.PyBudaModule):
        def __init__(self, name):
            super().__init__(name)
            self.weights = pybuda.Parameter(1, 1, 32, 32, requires_grad=False)

        def forward(self, act):
            return pybuda.op.Matmul("matmul", act, self.weights)

    module = BudaMatmul("matmul0")
    weights = torch.rand(1, 1, 32, 32)
    module.set_parameter("matmul0.weights", weights)
    act = torch.rand(1, 1, 32, 32)
    start = time.perf_counter()
    graph, _ = module.trace(act)
    out = run_graph_on_cpu(graph, [act])[0]
    elapsed = time.perf_counter() - start
    print(graph)
    print(f"CPU reference vs torch: PCC {calculate_pcc(act @ weights, out):.6f}  ({elapsed * 1e3:.1f} ms)")
    print("note: the simulated chip is not built yet; this ran the op registry's CPU reference only.")
    return 0
