"""The backend build as data: descriptors, pipes and routes, streams, kernels, the files and their strict
reader, and the performance model reading its traffic from the same pipes."""

import json
import math
import os
import sys

import pytest
import yaml

from pybuda.arch import PRESETS, get_device_descriptor, with_chips
from pybuda.backend_build import routing
from pybuda.backend_build.build import BackendBuild, build
from pybuda.backend_build.descriptors import (
    cluster_desc_dict, cluster_desc_yaml, device_desc_yaml, read_device_descriptor,
)
from pybuda.backend_build.routing import STREAM_RANGES, core_streams, epoch_pipes, noc_path
from pybuda.errors import ConfigError, ImageError
from pybuda.netlist import parse_file
from pybuda.perf import cost
from pybuda.perf.model import PerfConfig, estimate
from pybuda.perf.report import routes_svg, to_html

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "perf"))
from perf_netlists import graph, netlist, op, program, queue, stream  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "netlist", "fixtures")
N150 = get_device_descriptor(device_config="wh_n150")


# --------------------------------------------------------------------------------------------------
# Descriptors
# --------------------------------------------------------------------------------------------------

def _descriptors():
    out = [get_device_descriptor(device_config=p) for p in PRESETS]
    out += [get_device_descriptor("wormhole_b0", harvesting_mask=0b101),
            get_device_descriptor("grayskull", harvesting_mask=0b1001),
            get_device_descriptor("blackhole", harvesting_mask=0b11),
            with_chips(get_device_descriptor(device_config="wh_n150"), 4)]
    return out


@pytest.mark.parametrize("desc", _descriptors(), ids=lambda d: f"{d.name}-m{d.harvesting_mask}-c{d.chip_count}")
def test_device_desc_round_trip(desc, tmp_path):
    text = device_desc_yaml(desc)
    assert read_device_descriptor(text) == desc
    path = tmp_path / "device_desc.yaml"
    path.write_text(text)
    assert read_device_descriptor(path) == desc
    data = yaml.safe_load(text)
    assert data["grid"] == {"x_size": desc.noc_grid[0], "y_size": desc.noc_grid[1]}
    assert len(data["functional_workers"]) == desc.cores_per_chip
    assert data["pybuda"]["harvesting_mask"] == desc.harvesting_mask
    assert all("-" in c for c in data["functional_workers"] + data["dram"][0])


def test_descriptor_errors_are_config_errors(tmp_path):
    good = yaml.safe_load(device_desc_yaml(N150))
    with pytest.raises(ConfigError, match="not found"):
        read_device_descriptor(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="not valid YAML"):
        read_device_descriptor("arch_name: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):  # safe_load refuses object tags
        read_device_descriptor("!!python/object/apply:os.system ['true']\n")
    bad = dict(good, arch_name="QUANTUM")
    with pytest.raises(ConfigError, match="unknown arch"):
        read_device_descriptor(yaml.safe_dump(bad))
    bad = dict(good, pybuda=dict(good["pybuda"], harvesting_mask=2))
    with pytest.raises(ConfigError, match="harvesting_mask"):
        read_device_descriptor(yaml.safe_dump(bad))
    bad = dict(good, functional_workers=good["functional_workers"][:-1])
    with pytest.raises(ConfigError, match="functional_workers"):
        read_device_descriptor(yaml.safe_dump(bad))
    bad = dict(good, extra=1)
    with pytest.raises(ConfigError, match="unknown key"):
        read_device_descriptor(yaml.safe_dump(bad))
    bad = dict(good, worker_l1_size="big")
    with pytest.raises(ConfigError, match="worker_l1_size"):
        read_device_descriptor(yaml.safe_dump(bad))
    path = tmp_path / "bad.yaml"
    path.write_text("- just a list\n")
    with pytest.raises(ConfigError):
        read_device_descriptor(path)


def test_cluster_desc_multichip():
    single = yaml.safe_load(cluster_desc_yaml(N150))
    assert single["chips"] == {0: [0, 0, 0, 0]} and single["ethernet_connections"] == []
    n300 = cluster_desc_dict(get_device_descriptor(device_config="wh_n300"))
    assert set(n300["chips"]) == {0, 1} and n300["chips_with_mmio"] == [{0: 0}]
    assert n300["ethernet_connections"] and all({a["chip"], b["chip"]} == {0, 1}
                                                for a, b in n300["ethernet_connections"])
    galaxy = cluster_desc_dict(get_device_descriptor(device_config="galaxy"))
    assert len(galaxy["chips"]) == 32
    pairs = {(a["chip"], b["chip"]) for a, b in galaxy["ethernet_connections"]}
    assert (0, 1) in pairs and (0, 8) in pairs and (0, 9) not in pairs  # mesh neighbours only
    # every (chip, chan) is used by at most one link
    ends = [(e["chip"], e["chan"]) for link in galaxy["ethernet_connections"] for e in link]
    assert len(ends) == len(set(ends))


# --------------------------------------------------------------------------------------------------
# Pipes and streams of a compiled model
# --------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def compiled():
    import torch

    import pybuda
    from pybuda.compile import compile_graph

    class Small(pybuda.PyBudaModule):
        def __init__(self, name):
            super().__init__(name)
            self.w1 = pybuda.Parameter(torch.randn(1, 1, 128, 256), requires_grad=False)
            self.w2 = pybuda.Parameter(torch.randn(1, 1, 256, 128), requires_grad=False)

        def forward(self, x):
            h = pybuda.op.Gelu("gelu", pybuda.op.Matmul("mm1", x, self.w1))
            h = pybuda.op.Matmul("mm2", h, self.w2)
            return pybuda.op.Add("add", h, x)

    graph, _ = Small("small").trace(torch.randn(1, 1, 128, 128))
    result = compile_graph(graph, "wh_n150")
    return result.netlist


def _check_route(pipe, route, k):
    for a, b in zip(route, route[1:]):
        assert abs(a[0] - b[0]) + abs(a[1] - b[1]) == 1, f"{pipe.id}: {a} -> {b} is not one hop"
    if pipe.kind != "ethernet":
        assert tuple(route[0]) == tuple(pipe.sources[k].noc), f"{pipe.id}: route starts off its source"
    assert tuple(route[-1]) == tuple(pipe.destinations[-1].noc)
    for d in pipe.destinations:
        assert tuple(d.noc) in {tuple(p) for p in route}, f"{pipe.id}: misses destination {d.noc}"


def _check_pipes(nl, graph_name, pipes):
    by_operand = {}
    for p in pipes:
        by_operand.setdefault((p.consumer, p.operand), []).append(p)
        assert p.kind in routing.PIPE_KINDS
        assert p.gather == (len(p.sources) > 1)
        assert len(p.routes) == len(p.sources)
        for k, route in enumerate(p.routes):
            _check_route(p, route, k)
    for o in nl.graphs[graph_name].ops.values():
        for i, name in enumerate(o.inputs):
            ps = by_operand.get((o.name, i))
            assert ps, f"{o.name} input {i} has no pipe"
            dests = {d.core for p in ps for d in p.destinations}
            assert dests == set(o.cores()), f"{o.name} input {i}: pipes miss consumer cores"
            srcs = {(s.name, s.core if s.kind == "core" else s.buffer) for p in ps for s in p.sources}
            broadcast = any(tm.name == "broadcast" for tm in o.tms_of(i))
            if name in nl.queues:
                expect = {(name, b) for b in range(nl.queues[name].buffers)}
            else:
                expect = {(name, c) for c in nl.find_op(name)[1].cores()}
            assert srcs <= expect
            if not broadcast:
                assert srcs == expect, f"{o.name} input {i}: sources do not cover the producer"
        for q in nl.queues_fed_by(o.name):
            writes = by_operand.get((q.name, -1), [])
            assert {s.core for p in writes for s in p.sources} == set(o.cores())
            assert {d.buffer for p in writes for d in p.destinations} == set(range(q.buffers))


def test_pipes_of_a_compiled_model(compiled):
    nl = compiled
    kinds = set()
    for g in nl.graphs:
        pipes = epoch_pipes(nl, g, N150)
        _check_pipes(nl, g, pipes)
        kinds.update(p.kind for p in pipes)
    assert {"op", "dram_read"} <= kinds and kinds & {"dram_write", "host_write"}


@pytest.mark.parametrize("fixture", ["rich.yaml", "spec_example.yaml"])
def test_pipes_of_fixture_netlists(fixture):
    nl = parse_file(os.path.join(FIXTURES, fixture))
    for g in nl.graphs:
        _check_pipes(nl, g, epoch_pipes(nl, g, N150))


def test_gather_and_multicast_grouping():
    """A 1x4 producer into a 1-core consumer is a 4-source gather; a 2x3 matmul multicasts in0 along its
    rows and in1 down its columns, one pipe per row/column, each gathering the whole K strip."""
    qs = [queue("in", grid=(1, 4), mblock=(1, 1), entries=8), queue("w", grid=(2, 1), mblock=(1, 3), entries=1),
          queue("out", input="mm", grid=(2, 3), entries=8)]
    p = op("p", "nop", ["in"], grid=(1, 4))
    c = op("c", "nop", ["p"], loc=(1, 0), mblock=(1, 4))
    mm = op("mm", "matmul", ["p2", "w"], grid=(2, 3), loc=(2, 0), attrs={"m_k": 1, "u_kt": 2})
    p2 = op("p2", "nop", ["in"], grid=(1, 2), loc=(4, 0), mblock=(2, 2))
    nl = netlist(qs, [graph("g", [p, c, p2, mm])], program([("g", {"in": stream(), "w": stream(prologue=True)})]))
    pipes = epoch_pipes(nl, "g", N150)
    gather = [x for x in pipes if x.consumer == "c"]
    assert len(gather) == 1 and gather[0].source_count == 4 and gather[0].gather and not gather[0].multicast
    in0 = [x for x in pipes if x.consumer == "mm" and x.operand == 0]
    in1 = [x for x in pipes if x.consumer == "mm" and x.operand == 1]
    assert len(in0) == 2 and all(len(x.destinations) == 3 and x.multicast for x in in0)
    assert all(x.source_count == 2 for x in in0)  # both producer columns: the K strip
    assert len(in1) == 3 and all(len(x.destinations) == 2 for x in in1) and all(x.prologue for x in in1)
    assert len(in1) == cost.distinct_fetchers(routing._CostOp(mm), routing._CostModel(mm), 1)


def test_noc_path_is_dimension_ordered():
    assert noc_path((1, 1), (3, 0)) == [(1, 1), (2, 1), (3, 1), (3, 0)]
    assert noc_path((2, 2), (2, 2)) == [(2, 2)]


def test_streams_lie_in_spec_ranges():
    nl = parse_file(os.path.join(FIXTURES, "rich.yaml"))
    for g in nl.graphs:
        for cs in core_streams(nl, g, N150):
            ids = [b.stream_id for b in cs.buffers]
            assert len(ids) == len(set(ids))
            for b in cs.buffers:
                lo, hi = STREAM_RANGES[b.role]
                assert lo <= b.stream_id <= hi and b.size_bytes > 0
                if b.role == "input":
                    assert b.stream_id == b.operand and b.pipes
            assert any(b.role == "output" for b in cs.buffers)


# --------------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------------

def _rich_build():
    return build(parse_file(os.path.join(FIXTURES, "rich.yaml")), N150)


def test_files_round_trip():
    b = _rich_build()
    files = b.files()
    assert set(files) == {"device_desc.yaml", "cluster_desc.yaml"} | {
        f"temporal_epoch_{e.index}/{f}" for e in b.epochs for f in ("pipes.json", "streams.json", "kernels.json")}
    assert BackendBuild.from_files(files) == b
    assert BackendBuild.from_files({k: v.encode() for k, v in files.items()}) == b
    kernels = json.loads(files["temporal_epoch_0/kernels.json"])["ops"]
    assert {"unpack_df", "math_df", "pack_df", "math_fidelity", "mblock", "ublock", "grid_size"} <= set(kernels[0])


def test_temporal_epochs_map_and_program_order():
    nl = parse_file(os.path.join(FIXTURES, "rich.yaml"))
    names = list(nl.graphs)
    assert [e.graphs for e in build(nl, N150).epochs] == [(n,) for n in names]
    custom = build(nl, N150, {names[0]: 5, names[1]: 7})
    assert [e.index for e in custom.epochs] == [5, 7]
    assert "temporal_epoch_7/pipes.json" in custom.files()
    with pytest.raises(ConfigError):
        build(nl, N150, {names[0]: 1, names[1]: 1})


def _tamper(files, path, edit):
    doc = json.loads(files[path]) if path.endswith(".json") else yaml.safe_load(files[path])
    edit(doc)
    return dict(files, **{path: json.dumps(doc) if path.endswith(".json") else yaml.safe_dump(doc)})


def test_from_files_rejects_tampering():
    files = _rich_build().files()
    pipes = "temporal_epoch_0/pipes.json"
    cases = [
        (_tamper(files, pipes, lambda d: d["pipes"][0].update(extra=1)), "unknown key"),
        (_tamper(files, pipes, lambda d: d["pipes"][0].update(tiles_per_input="many")), "tiles_per_input"),
        (_tamper(files, pipes, lambda d: d["pipes"][0].pop("routes")), "missing key"),
        (_tamper(files, pipes, lambda d: d["pipes"][0].update(gather=not d["pipes"][0]["gather"])), "gather"),
        (_tamper(files, pipes, lambda d: d["pipes"][0].update(kind="teleport")), "kind"),
        (_tamper(files, pipes, lambda d: d.update(temporal_epoch=3)), "temporal_epoch"),
        (_tamper(files, "temporal_epoch_0/streams.json",
                 lambda d: d["cores"][0]["buffers"][0].update(stream_id=40)), "stream_id"),
        (_tamper(files, "temporal_epoch_0/kernels.json", lambda d: d["ops"][0].update(t="1")), "t"),
        (_tamper(files, "cluster_desc.yaml", lambda d: d["chips"].update({1: [1, 0, 0, 0]})), "cluster"),
        (_tamper(files, "device_desc.yaml", lambda d: d.update(worker_l1_size=-1)), "worker_l1_size"),
        ({k: v for k, v in files.items() if k != "temporal_epoch_0/streams.json"}, "missing file"),
        ({k: v for k, v in files.items() if k != "device_desc.yaml"}, "missing file"),
        (dict(files, **{"temporal_epoch_0/../../etc.yaml": "x: 1"}), "unknown file"),
        (dict(files, **{"notes.txt": "hello"}), "unknown file"),
        (dict(files, **{"cluster_desc.yaml": "a: &x [1]\nb: *x\n"}), "alias"),
        (dict(files, **{pipes: '{"pipes": [unclosed'}), "not valid JSON"),
        (dict(files, **{pipes: '{"temporal_epoch": NaN}'}), "not valid JSON"),
        (dict(files, **{pipes: b"\xff\xfe"}), "UTF-8"),
        (dict(files, **{pipes: "!!python/object/apply:os.system ['true']\n"}), "not valid JSON"),
        (dict(files, **{"cluster_desc.yaml": "!!python/object/apply:os.system ['true']\n"}), "YAML|cluster"),
    ]
    for tampered, words in cases:
        with pytest.raises(ImageError, match=words):
            BackendBuild.from_files(tampered)
    with pytest.raises(ImageError, match="temporal_epoch_0/pipes.json: pipes\\[0\\].extra|unknown key"):
        BackendBuild.from_files(cases[0][0])


# --------------------------------------------------------------------------------------------------
# One source for traffic: the performance model reads the pipes
# --------------------------------------------------------------------------------------------------

def _traffic_netlist():
    qs = [queue("a", input="earlier", grid=(2, 1), mblock=(1, 2), ublock=(2, 2), entries=8, channels=(0, 3)),
          queue("b", input="earlier", grid=(1, 3), mblock=(2, 1), ublock=(2, 2), entries=8, channels=(1,)),
          queue("out", input="g", grid=(1, 1), mblock=(2, 3), ublock=(2, 2), entries=8, channels=(2,))]
    mm = op("mm", "matmul", ["a", "b"], grid=(2, 3), mblock=(1, 1), ublock=(2, 2), attrs={"m_k": 2, "u_kt": 2})
    g = op("g", "gelu", ["mm"], grid=(1, 1), loc=(3, 0), mblock=(2, 3), ublock=(2, 2))
    return netlist(qs, [graph("g0", [mm, g])], program([("g0", {"a": stream(), "b": stream()})]))


def test_estimator_dram_and_gather_figures_equal_the_pipes():
    nl = _traffic_netlist()
    cfg = PerfConfig(gather_pipes=True)
    r = estimate(nl, N150, config=cfg)
    pipes = epoch_pipes(nl, "g0", N150)
    bw = cost.device_bandwidth(N150)
    # DRAM: every non-prologue read pipe and every write pipe, spread over its queue's channels
    per_channel = {}
    for p in pipes:
        if p.kind not in ("dram_read", "dram_write") or p.prologue:
            continue
        q = nl.queues[p.producer if p.kind == "dram_read" else p.consumer]
        for ch, _ in q.dram:
            per_channel[ch] = per_channel.get(ch, 0.0) + p.bytes_per_input / len(q.dram)
    expect = {f"0:{ch}": math.ceil(v / bw.dram_per_channel) for ch, v in sorted(per_channel.items())}
    assert r.epochs[0].dram_channel_cycles == expect
    # gather: g's one core collects mm's six cores through one pipe
    (gp,) = [p for p in pipes if p.consumer == "g"]
    assert gp.source_count == 6
    rate = cfg.pipe_gather_bytes_per_s + (math.log2(6) - 1) / (math.log2(16) - 1) * (
        cfg.pipe_gather_many_bytes_per_s - cfg.pipe_gather_bytes_per_s)
    assert r.op("g").noc_cycles == max(math.ceil(gp.bytes_per_input / (rate / N150.aiclk_hz)),
                                       math.ceil(cost.output_tiles_per_core(routing._CostModel(nl.graphs["g0"].ops["g"]))
                                                 * cost.tile_size_bytes(nl.graphs["g0"].ops["g"].out_df)
                                                 / (cfg.pipe_direct_bytes_per_s / N150.aiclk_hz)))


def test_estimator_reads_traffic_only_from_the_pipes(monkeypatch):
    """Doubling every pipe's bytes and giving every pipe one more source doubles the DRAM figures and
    changes the gather rate: the estimator has no second definition of the traffic."""
    import dataclasses

    from pybuda.perf import estimator

    nl = _traffic_netlist()
    cfg = PerfConfig(gather_pipes=True)
    before = estimate(nl, N150, config=cfg)
    real = estimator.graph_pipes

    def doubled(*args, **kwargs):
        return [dataclasses.replace(p, bytes_per_input=2 * p.bytes_per_input, sources=p.sources + p.sources[:1])
                for p in real(*args, **kwargs)]
    monkeypatch.setattr(estimator, "graph_pipes", doubled)
    after = estimate(nl, N150, config=cfg)
    for key, cycles in before.epochs[0].dram_channel_cycles.items():
        assert after.epochs[0].dram_channel_cycles[key] in (2 * cycles - 1, 2 * cycles, 2 * cycles + 1)
    assert after.op("g").noc_cycles > before.op("g").noc_cycles


# --------------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------------

def test_report_draws_routes_when_given_pipes():
    nl = _traffic_netlist()
    r = estimate(nl, N150)
    plain = to_html(r)
    assert "Routes per epoch" not in plain and "<polyline" not in plain
    b = build(nl, N150)
    page = to_html(r, routes=b)
    assert "Routes per epoch" in page and page.count("<polyline") == sum(len(p.routes) for p in b.epochs[0].pipes)
    assert "http://" not in page and "https://" not in page
    assert to_html(r, routes={0: list(b.epochs[0].pipes)}) == page
    svg = routes_svg(b.epochs[0].pipes, N150.noc_grid)
    assert svg.startswith("<svg") and svg.endswith("</svg>") and 'data-kind="dram_read"' in svg
