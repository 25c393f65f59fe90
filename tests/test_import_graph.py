"""The package's module-level imports form no cycle, and the layers keep their direction."""

import os
import textwrap

import pybuda
from tests.import_graph import cycles, import_graph

PACKAGE_DIR = os.path.dirname(pybuda.__file__)


def test_no_module_level_import_cycle():
    found = cycles(import_graph(PACKAGE_DIR))
    assert found == [], "module-level import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def _write(root, files):
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_a_cycle_made_on_purpose_is_found(tmp_path):
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg.b import f\n",
        "pkg/b.py": "def f():\n    from pkg import c  # lazy: no edge\n",
        "pkg/c.py": "import pkg.a\n",
        "pkg/sub/__init__.py": "from pkg.sub.d import g\n",
        "pkg/sub/d.py": "from pkg.b import f\ng = f\n",
        "pkg/e.py": "from pkg.sub.d import g\n",  # runs pkg/sub/__init__ first
    })
    graph = import_graph(str(tmp_path / "pkg"))
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.b"] == set()
    assert graph["pkg.e"] == {"pkg.sub", "pkg.sub.d"}
    assert cycles(graph) == []
    _write(tmp_path, {"pkg/b.py": "from pkg.c import x\n", "pkg/c.py": "import pkg.a\nx = 1\n"})
    assert cycles(import_graph(str(tmp_path / "pkg"))) == [["pkg.a", "pkg.b", "pkg.c"]]
    # through a subpackage __init__: d -> b -> sub (its __init__) -> d
    _write(tmp_path, {"pkg/b.py": "from pkg.sub.d import g\n", "pkg/c.py": "x = 1\n"})
    assert cycles(import_graph(str(tmp_path / "pkg"))) == [["pkg.b", "pkg.sub", "pkg.sub.d"]]


def _imports_of(graph, prefix):
    return {dep for mod, deps in graph.items() if mod == prefix or mod.startswith(prefix + ".") for dep in deps}


def test_layers_point_down():
    """The chip vocabulary sits below everything; the backend (golden device, performance model) and the
    netlist never reach up into the compiler, the frontends or the runtime."""
    graph = import_graph(PACKAGE_DIR)
    assert _imports_of(graph, "pybuda.dtypes") <= {"pybuda.errors"}
    for low in ("pybuda.golden", "pybuda.perf", "pybuda.arch", "pybuda.backend_build"):
        up = {d for d in _imports_of(graph, low)
              if d.split(".")[1] in ("passes", "frontend", "runtime", "compile", "balancer", "placer", "module",
                                     "tensor", "cli", "op")}
        assert up == set(), f"{low} imports {sorted(up)}"
    for stage in ("pybuda.balancer", "pybuda.placer"):
        up = {d for d in _imports_of(graph, stage)
              if d.split(".")[1] in ("passes", "frontend", "runtime", "compile", "golden", "cli")}
        assert up == set(), f"{stage} imports {sorted(up)}"
