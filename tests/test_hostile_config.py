"""Hostile configuration, graph files and tensor files end in a PybudaError naming what is wrong."""

import copy
import json
import random

import pytest
import torch

import pybuda
from pybuda.compile import compile_graph
from pybuda.config import CompileDepth, CompilerConfig, _get_global_compiler_config
from pybuda.dtypes import DataFormat, MathFidelity
from pybuda.errors import ConfigError, GraphFormatError, PybudaError
from pybuda.ir.graph import Graph


# --- config values -------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, field", [
    ({"default_df_override": 5}, "default_df_override"),
    ({"default_df_override": "Float17"}, "default_df_override"),
    ({"num_chips": "two"}, "num_chips"),
    ({"enable_auto_fusing": "no"}, "enable_auto_fusing"),
    ({"enable_auto_fusing": 0}, "enable_auto_fusing"),
    ({"math_fidelity": "HiFi9"}, "default_math_fidelity"),
    ({"compile_depth": 3}, "compile_depth"),
    ({"balancer_policy": 7}, "balancer_policy"),
])
def test_set_configuration_options_type_checks(kwargs, field):
    with pytest.raises(ConfigError, match=field):
        pybuda.set_configuration_options(**kwargs)


def test_bad_values_name_the_accepted_ones():
    with pytest.raises(ConfigError, match="True or False"):
        pybuda.set_configuration_options(enable_auto_fusing="no")
    with pytest.raises(ConfigError, match="Float16_b"):
        pybuda.set_configuration_options(default_df_override=5)


def test_good_values_are_accepted_and_enum_names_converted():
    pybuda.set_configuration_options(default_df_override="Bfp8_b", math_fidelity="HiFi2", num_chips=2,
                                     enable_auto_fusing=False, compile_depth="balancer_pass")
    cfg = _get_global_compiler_config()
    assert cfg.default_df_override is DataFormat.Bfp8_b and cfg.default_math_fidelity is MathFidelity.HiFi2
    assert cfg.num_chips == 2 and cfg.enable_auto_fusing is False
    assert cfg.compile_depth is CompileDepth.BALANCER_PASS


def test_direct_assignment_and_constructor_are_checked():
    cfg = CompilerConfig()
    with pytest.raises(ConfigError, match="enable_consteval"):
        cfg.enable_consteval = "yes"
    with pytest.raises(ConfigError, match="num_chips"):
        CompilerConfig(num_chips=1.5)
    cfg.compile_depth = CompileDepth.GENERATE_NETLIST  # real enums still fine
    cfg.default_df_override = None


def test_env_values_name_the_variable(monkeypatch):
    monkeypatch.setenv("PYBUDA_AMP_LEVEL", "abc")
    with pytest.raises(ConfigError, match="PYBUDA_AMP_LEVEL"):
        CompilerConfig()
    monkeypatch.delenv("PYBUDA_AMP_LEVEL")
    monkeypatch.setenv("PYBUDA_BALANCER_POLICY_TYPE", "Nonsense")
    with pytest.raises(ConfigError, match="PYBUDA_BALANCER_POLICY_TYPE"):
        CompilerConfig()


def test_configure_mixed_precision_checks_formats_and_indices():
    with pytest.raises(ConfigError, match="output_df"):
        pybuda.configure_mixed_precision(op_type="matmul", output_df="Float99")
    with pytest.raises(ConfigError, match="index"):
        pybuda.configure_mixed_precision(op_type="matmul", input_df={-1: (DataFormat.Bfp8_b, False)})
    with pytest.raises(ConfigError):
        pybuda.configure_mixed_precision(op_type="matmul", input_df={0: (DataFormat.Bfp8_b, "yes")})
    assert not _get_global_compiler_config().amp_properties


def _tiny_graph():
    class _Tiny(pybuda.PyBudaModule):
        def __init__(self):
            super().__init__("tiny")
            self.w = pybuda.Parameter(torch.ones(64, 64) * 0.01, requires_grad=False)

        def forward(self, x):
            return pybuda.op.Matmul("mm", x, self.w)

    graph, _ = _Tiny().trace(torch.randn(1, 32, 64))
    return graph


def test_input_df_index_out_of_range_names_op_and_index(tmp_path):
    pybuda.configure_mixed_precision(name_regex="mm", input_df={5: (DataFormat.Bfp8_b, False)})
    cfg = _get_global_compiler_config()
    cfg.backend_output_dir = str(tmp_path)
    with pytest.raises(PybudaError, match=r"(?s)index 5.*mm"):
        compile_graph(_tiny_graph(), "wh_n150", cfg)


def test_input_df_index_in_range_and_amp_light_still_compile(tmp_path):
    pybuda.configure_mixed_precision(name_regex="mm", input_df={1: (DataFormat.Bfp8_b, False)})
    cfg = _get_global_compiler_config()
    cfg.enable_amp_light()  # its index 2 (a bias) does not exist here, and that is fine
    cfg.backend_output_dir = str(tmp_path)
    compile_graph(_tiny_graph(), "wh_n150", cfg)


# --- tampered graph JSON --------------------------------------------------------------------------------
def _saved(tmp_path):
    g = _tiny_graph()
    g.save(str(tmp_path / "g"))
    return g, json.loads((tmp_path / "g.json").read_text())


def test_round_trip_still_works(tmp_path):
    g, _ = _saved(tmp_path)
    g2 = Graph.load(str(tmp_path / "g"))
    assert g2.to_dict() == g.to_dict()


@pytest.mark.parametrize("edit, field", [
    (lambda d: d.pop("nodes"), "nodes"),
    (lambda d: d.__setitem__("name", 5), "name"),
    (lambda d: d["nodes"][0].pop("kind"), "kind"),
    (lambda d: d["nodes"][0].__setitem__("kind", "wizard"), "kind"),
    (lambda d: d["nodes"][0].__setitem__("shape", "big"), "shape"),
    (lambda d: d["nodes"][0].__setitem__("dtype", "float1"), "dtype"),
    (lambda d: d["nodes"][-2].__setitem__("operands", [7]), "operands"),
    (lambda d: d["nodes"][-2].__setitem__("op_type", "no_such_op"), "no_such_op"),
    (lambda d: d["nodes"][-2].__setitem__("shape", [1, 32, 65]), "shape"),
    (lambda d: d["nodes"][-2].__setitem__("attrs", {"x": {"__enum__": "nothing", "name": "y"}}), "attrs"),
    (lambda d: d.__setitem__("microbatch", 0), "microbatch"),
])
def test_tampered_json_names_the_field(tmp_path, edit, field):
    _, d = _saved(tmp_path)
    edit(d)
    with pytest.raises(GraphFormatError, match=field):
        Graph.from_dict(d)


def test_invalid_json_text_is_a_graph_format_error():
    with pytest.raises(GraphFormatError):
        Graph.from_json("{not json")


def _mutations(value, rng):
    """Yield (path description, mutated copy) pairs of one JSON document."""
    replacements = [None, 0, -1, 1.5, True, "", "x", [], {}, [1, 2], {"__enum__": "DataFormat", "name": "Bad"}]
    paths = []

    def walk(v, path):
        paths.append(path)
        if isinstance(v, dict):
            for k, c in v.items():
                walk(c, path + [k])
        elif isinstance(v, list):
            for i, c in enumerate(v):
                walk(c, path + [i])

    walk(value, [])
    for path in paths:
        for rep in rng.sample(replacements, 4) + ["delete"]:
            doc = copy.deepcopy(value)
            if not path:
                continue
            parent = doc
            for p in path[:-1]:
                parent = parent[p]
            if rep == "delete":
                if isinstance(parent, dict):
                    del parent[path[-1]]
                else:
                    parent.pop(path[-1])
            else:
                parent[path[-1]] = rep
            yield path, doc


def test_every_mutation_is_a_pybuda_error_or_a_valid_graph(tmp_path):
    g, d = _saved(tmp_path)
    tensors = dict(g.tensors)
    rng = random.Random(0)
    count = 0
    for path, doc in _mutations(d, rng):
        count += 1
        try:
            g2 = Graph.from_dict(doc, tensors)
        except PybudaError:
            continue
        # A graph that loads is well formed: it serialises again and its ops re-validate.
        Graph.from_dict(json.loads(g2.to_json()), tensors)
    assert count > 50


# --- safetensors ----------------------------------------------------------------------------------------
def test_truncated_safetensors_names_the_file(tmp_path):
    _saved(tmp_path)
    path = tmp_path / "g.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(GraphFormatError, match="g.safetensors"):
        Graph.load(str(tmp_path / "g"))


def test_garbage_safetensors_names_the_file(tmp_path):
    _saved(tmp_path)
    (tmp_path / "g.safetensors").write_bytes(b"\xff" * 7)
    with pytest.raises(GraphFormatError, match="g.safetensors"):
        Graph.load(str(tmp_path / "g"))


def test_edited_tensor_shape_is_caught_at_load(tmp_path):
    from safetensors.torch import save_file

    g, _ = _saved(tmp_path)
    tensors = {k: v.clone() for k, v in g.tensors.items()}
    name = next(iter(tensors))
    tensors[name] = torch.zeros(3, 3)
    save_file(tensors, str(tmp_path / "g.safetensors"))
    with pytest.raises(GraphFormatError, match=rf"(?s)g.json.*{name}.*\[3, 3\]"):
        Graph.load(str(tmp_path / "g"))


def test_missing_tensor_is_caught_at_load(tmp_path):
    from safetensors.torch import save_file

    _saved(tmp_path)
    save_file({}, str(tmp_path / "g.safetensors"))
    with pytest.raises(GraphFormatError, match="no tensor"):
        Graph.load(str(tmp_path / "g"))
