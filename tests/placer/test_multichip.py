"""Multi-chip placement without Ethernet: Grayskull cards in one host pipeline a model, and the edges between
chips go through queues in host memory (PCIe), which the performance model costs as host traffic."""

import pytest
import torch

import pybuda
from pybuda.arch import get_device_descriptor
from pybuda.perf.model import estimate_compiled


class Chain(pybuda.PyBudaModule):
    def __init__(self, name):
        super().__init__(name)
        g = torch.Generator().manual_seed(1)
        self.w = pybuda.Parameter(torch.rand(64, 64, generator=g) - 0.5, requires_grad=False)

    def forward(self, x):
        mm = pybuda.op.Matmul("mm", x, self.w)
        return pybuda.op.Exp("exp", pybuda.op.Relu("relu", mm))


X = torch.rand(2, 64, 64, generator=torch.Generator().manual_seed(2))


def _run(arch, num_chips, chip_break=True):
    pybuda.pybuda_reset()
    pybuda.set_configuration_options(enable_auto_fusing=False)
    if chip_break:
        pybuda.set_chip_break("relu")
    tt = pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden, arch=arch, num_chips=num_chips,
                         module=Chain("m"))
    out = pybuda.run_inference(inputs=[(X,)]).get(timeout=120)[0].value()
    return out, tt.get_compiled_results()[0]


def test_grayskull_cards_pipeline_through_host_queues():
    single, _ = _run(pybuda.BackendDevice.Grayskull, 1, chip_break=False)
    multi, results = _run(pybuda.BackendDevice.Grayskull, 2)
    assert torch.equal(multi, single)  # the host queue carries the same tiles a DRAM queue would
    ps = results.placer_solution
    assert ps.op_placements["mm"].chip_id != ps.op_placements["relu"].chip_id
    (e2e,) = ps.epoch_to_epoch_queues
    assert ps.queue_placements[e2e].loc == "host" and ps.queue_placements[e2e].host
    assert ps.queue_placements[e2e].grid_size == (1, 1)
    assert results.netlist.queues[e2e].loc == "host"
    # both chips' graphs are in the netlist
    assert {g.target_device for g in results.netlist.graphs.values()} == {0, 1}
    assert results.device.chip_link == "pcie"


def test_wormhole_chips_keep_chip_to_chip_queues_in_dram():
    _, results = _run(pybuda.BackendDevice.Wormhole_B0, 2)
    ps = results.placer_solution
    (e2e,) = ps.epoch_to_epoch_queues
    assert ps.queue_placements[e2e].loc == "dram"
    assert results.device.chip_link == "ethernet"


def test_host_queue_between_grayskull_cards_is_costed_over_pcie():
    _, results = _run(pybuda.BackendDevice.Grayskull, 2)
    report = estimate_compiled(results)
    assert report.chips == 2
    relu = report.op("relu")
    assert relu.pcie_cycles > 0  # relu reads its input from host memory
    assert relu.eth_cycles == 0


@pytest.mark.parametrize("preset", ["gs_e150", "gs_e75"])
def test_grayskull_multi_card_descriptor(preset):
    desc = get_device_descriptor(device_config=preset, num_chips=4)
    assert desc.chip_count == 4 and desc.chip_link == "pcie"
    assert desc.total_cores == 4 * desc.cores_per_chip


def test_galaxy_cluster_pipelines_over_ethernet_queues():
    single, _ = _run(pybuda.BackendDevice.Wormhole_B0, 1, chip_break=False)
    pybuda.pybuda_reset()
    pybuda.set_configuration_options(enable_auto_fusing=False, device_config="galaxy")
    pybuda.set_chip_break("relu")
    pybuda.set_chip_break("exp")
    tt = pybuda.TTCluster("galaxy0", module=Chain("m"))  # every chip of the card
    assert tt.num_chips == 32
    out = pybuda.run_inference(inputs=[(X,)]).get(timeout=120)[0].value()
    assert torch.allclose(out, single, rtol=0.02, atol=0.02)
    results = tt.get_compiled_results()[0]
    ps = results.placer_solution
    chips = [ps.op_placements[op].chip_id for op in ("mm", "relu", "exp")]
    assert len(set(chips)) == 3
    for name in ps.epoch_to_epoch_queues:  # chip-to-chip queues in the consumer chip's DRAM
        qp = ps.queue_placements[name]
        assert qp.loc == "dram" and qp.chip_id == ps.op_placements[ps.e2e_queues[name].consumers[0]].chip_id
    assert len(ps.epoch_to_epoch_queues) == 2
    assert estimate_compiled(results).chips == 32
