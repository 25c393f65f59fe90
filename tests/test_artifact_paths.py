"""User-given names (module, graph, report names) never make a writer leave the build folder."""

import os

import pytest
import torch

import pybuda
from pybuda.compile import compile_graph
from pybuda.config import CompilerConfig
from pybuda.errors import ConfigError, GraphFormatError
from pybuda.ir.graph import Graph
from pybuda.paths import path_inside, safe_file_name


class _Tiny(pybuda.PyBudaModule):
    def __init__(self, name):
        super().__init__(name)
        self.w = pybuda.Parameter(torch.ones(64, 64) * 0.01, requires_grad=False)

    def forward(self, x):
        return pybuda.op.Matmul("mm", x, self.w)


def _files_under(root):
    return {os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs}


@pytest.mark.parametrize("name", ["plain", "a/b", "../../escape", "/tmp/abs_escape", "..", ".hidden", "a\\b", "x\x00y"])
def test_safe_file_name_is_one_harmless_component(name):
    out = safe_file_name(name)
    assert out and "/" not in out and "\\" not in out and "\x00" not in out
    assert not out.startswith(".")
    assert os.path.basename(out) == out


def test_plain_names_are_unchanged():
    assert safe_file_name("bert.encoder_layer-1") == "bert.encoder_layer-1"


def test_path_inside_refuses_escapes(tmp_path):
    assert path_inside(tmp_path, "a.json") == str(tmp_path / "a.json")
    with pytest.raises(ConfigError, match="outside the build folder"):
        path_inside(tmp_path, "../x.json")
    with pytest.raises(ConfigError):
        path_inside(tmp_path, "/etc/passwd")


def test_symlink_planted_in_build_folder_is_refused(tmp_path):
    build, elsewhere = tmp_path / "build", tmp_path / "elsewhere"
    build.mkdir()
    elsewhere.mkdir()
    os.symlink(elsewhere, build / "placement_reports")
    with pytest.raises(ConfigError):
        path_inside(build, "placement_reports", "m_placement.json")


@pytest.mark.parametrize("name", ["../../escaped_module", "/tmp/pybuda_abs_escape_test", "sub/dir/name"])
def test_write_artifacts_stays_in_the_build_folder(tmp_path, name):
    build = tmp_path / "deep" / "build"
    cfg = CompilerConfig()
    cfg.backend_output_dir = str(build)
    module = _Tiny(name)
    graph, _ = module.trace(torch.randn(1, 32, 64))
    before_outside = _files_under(tmp_path) - _files_under(build)
    r = compile_graph(graph, "wh_n150", cfg)
    real_build = os.path.realpath(build)
    for path in r.artifacts.values():
        assert os.path.realpath(path).startswith(real_build + os.sep), path
    assert _files_under(tmp_path) - _files_under(build) == before_outside
    assert not os.path.exists("/tmp/pybuda_abs_escape_test_netlist.yaml")


def test_graph_json_with_escaping_name_round_trips_and_writes_inside(tmp_path):
    g = Graph("../../evil")
    g.add_input("x", (1, 32, 32))
    g.add_output("out", "x")
    g2 = Graph.from_json(g.to_json())
    assert g2.name == "../../evil"  # the name is kept; only file names built from it are sanitised
    with pytest.raises(GraphFormatError):
        Graph.from_json(g.to_json().replace("../../evil", "evil\\u0000name"))


def test_perf_report_basename_is_sanitised(tmp_path):
    from pybuda.perf import report as rep

    class _R:
        ops = []

        def to_dict(self):
            return {}

    out = tmp_path / "out"
    orig = rep.to_html
    rep.to_html = lambda report, title="", routes=None: "<html></html>"
    try:
        paths = rep.write_reports(_R(), out, basename="../../../escaped_report")
    finally:
        rep.to_html = orig
    for p in paths.values():
        assert os.path.realpath(p).startswith(os.path.realpath(out) + os.sep)
