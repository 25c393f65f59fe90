"""CPU fallback stages stored as data (pybuda.frontend.fx_serde): round trips, fresh-process loading, hostile files."""

import copy
import json
import operator
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
import safetensors.torch
import torch
from torch import nn

from pybuda.config import CompilerConfig
from pybuda.errors import ImageError, InputError
from pybuda.frontend.fx_serde import LoadedStage, stage_from_data, stage_to_data
from pybuda.frontend.torch import capture

REPO = pathlib.Path(__file__).resolve().parents[2]
VOCAB = 20


@torch.library.custom_op("pybuda_fxserde_test::odd", mutates_args=())
def odd(x: torch.Tensor) -> torch.Tensor:
    """A custom op (not in the allow-list) made of ATen ops: stored as those ops."""
    return x * 3 - 1


@odd.register_fake
def _(x):
    return torch.empty_like(x)


@torch.library.custom_op("pybuda_fxserde_test::flip_negative_rows", mutates_args=())
def flip_negative_rows(x: torch.Tensor) -> torch.Tensor:
    """A custom op whose implementation loops over tensor values: no fixed ATen graph computes it."""
    out = x.clone()
    for i, negative in enumerate((x[:, 0] < 0).tolist()):
        if negative:
            out[i] = -x[i]
    return out


@flip_negative_rows.register_fake
def _(x):
    return torch.empty_like(x)


class Tagger(nn.Module):
    """Embedding first (CPU pre, int64 ids); max/cumsum/masked_fill(-inf)+topk at the end (CPU post, by
    cpu_fallback_ops)."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 8)
        self.l1 = nn.Linear(8, 8)
        self.l2 = nn.Linear(8, 8)
        self.register_buffer("mask", torch.tensor([True, False, False, True, False, False, True, False]))

    def forward(self, ids, x):
        h = self.emb(ids) * 2.0 + x
        h = self.l2(torch.relu(self.l1(h)))
        v, i = torch.max(h, dim=-1)
        c = torch.cumsum(h, dim=-1, dtype=torch.float64)
        m = h.masked_fill(self.mask, float("-inf"))
        t = torch.topk(m, 3, dim=-1)
        return v, i, c, t.values, t.indices


class SortBessel(nn.Module):
    """sort at the start (pre by cpu_fallback_ops, getitem on a multi-output op), a Bessel function at the end (post)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)

    def forward(self, x):
        y = torch.sort(x, dim=-1, descending=True).values
        z = torch.relu(self.a(y)).softmax(-1)
        return torch.special.i1(z), y


class CustomTail(nn.Module):
    def __init__(self, op=odd):
        super().__init__()
        self.head = nn.Sequential(*[nn.Linear(8, 8) for _ in range(3)])
        self.tail = nn.Linear(8, 8)
        self.op = op

    def forward(self, x):
        return self.tail(self.op(self.head(x)))


def tagger_config():
    cfg = CompilerConfig()
    cfg.cpu_fallback_ops = ["embedding", "max", "cumsum", "masked_fill", "topk"]
    return cfg


def sort_config():
    cfg = CompilerConfig()
    cfg.cpu_fallback_ops = ["sort"]
    return cfg


def tagger_inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (2, 5), generator=g), torch.randn(2, 5, 8, generator=g)


@pytest.fixture(scope="module")
def stages():
    """name -> GraphModule of the real CPU stages of the test models."""
    torch.manual_seed(0)
    out = {}
    tagger = capture(Tagger().eval(), tagger_inputs(), config=tagger_config())
    out["tagger_pre"], out["tagger_post"] = tagger.pre, tagger.post
    sort = capture(SortBessel().eval(), (torch.randn(2, 3, 8),), config=sort_config())
    out["sort_pre"], out["sort_post"] = sort.pre, sort.post
    assert all(isinstance(v, torch.fx.GraphModule) for v in out.values())
    return out


def round_trip(gm, name):
    """Save as JSON text + safetensors bytes, load back."""
    data, tensors = stage_to_data(gm, name)
    text = json.dumps(data, allow_nan=False)  # strict JSON: no Infinity/NaN tokens
    blob = safetensors.torch.save(tensors) if tensors else safetensors.torch.save({})
    return stage_from_data(json.loads(text), safetensors.torch.load(blob)), data


def random_inputs(gm, seed):
    g = torch.Generator().manual_seed(seed)
    inputs = []
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        val = node.meta["val"]
        if val.dtype.is_floating_point:
            inputs.append(torch.randn(tuple(val.shape), generator=g).to(val.dtype))
        else:
            inputs.append(torch.randint(0, VOCAB, tuple(val.shape), generator=g, dtype=val.dtype))
    return inputs


def assert_identical(got, want):
    assert isinstance(got, tuple) and len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)  # also checks dtype and shape


def targets(data):
    return [n.get("target") for n in data["nodes"] if n["op"] == "call_function"]


def all_values(obj):
    """Every JSON leaf/tagged value in a node list (for format assertions)."""
    if isinstance(obj, dict):
        yield obj
        for v in obj.values():
            yield from all_values(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from all_values(v)


# --- round trips of real stages -------------------------------------------------------------------
@pytest.mark.parametrize("name", ["tagger_pre", "tagger_post", "sort_pre", "sort_post"])
def test_real_stage_round_trip_is_bit_identical(stages, name):
    gm = stages[name]
    loaded, data = round_trip(gm, name)
    for seed in range(3):
        inputs = random_inputs(gm, seed)
        with torch.no_grad():
            assert_identical(loaded(*inputs), gm(*inputs))
    # No generated code: the loaded stage walks its nodes; parameters come back as plain tensors.
    assert isinstance(loaded, LoadedStage)
    assert all(not t.requires_grad for t in loaded._tensors.values())
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    assert [c[0] for c in loaded.calls()] == [n.name for n in calls]


def test_stage_contents_cover_ids_getitem_kwargs_dtype_and_inf(stages):
    pre, _ = stage_to_data(stages["tagger_pre"], "tagger_pre")
    post, _ = stage_to_data(stages["tagger_post"], "tagger_post")
    sort_pre, _ = stage_to_data(stages["sort_pre"], "sort_pre")
    # int64 ids into the checked embedding (with its label kwarg) in the pre stage
    assert stages["tagger_pre"].graph.find_nodes(op="placeholder")[0].meta["val"].dtype == torch.int64
    (emb,) = [n for n in pre["nodes"] if n.get("target") == "pybuda.checked_embedding"]
    assert isinstance(emb["kwargs"]["label"], str) and "ids" in emb["kwargs"]["label"]
    assert pre["tensors"]["emb_weight"] == {"dtype": "float32", "shape": [VOCAB, 8]}
    # multi-output ops and their getitems, a dtype kwarg, an -inf constant in the post stage
    assert {"aten.max.dim", "aten.topk.default", "aten.cumsum.default", "operator.getitem"} <= set(targets(post))
    (cumsum,) = [n for n in post["nodes"] if n.get("target") == "aten.cumsum.default"]
    assert cumsum["kwargs"] == {"dtype": {"t": "dtype", "v": "float64"}}
    assert {"t": "float", "v": "-inf"} in list(all_values(post["nodes"]))
    assert "operator.getitem" in targets(sort_pre) and any(t.startswith("aten.sort.") for t in targets(sort_pre))
    assert post["tensors"]["mask"] == {"dtype": "bool", "shape": [8]}
    for data in (pre, post, sort_pre):
        assert data["nodes"][-1]["op"] == "output"


def test_whole_model_runs_through_loaded_stages(stages):
    """pre -> device graph -> post with loaded stages gives the model's outputs."""
    from pybuda.verify import run_graph_on_cpu

    model = Tagger().eval()
    ids, x = tagger_inputs(1)
    result = capture(model, (ids, x), config=tagger_config())
    pre, _ = round_trip(result.pre, "pre")
    post, _ = round_trip(result.post, "post")
    with torch.no_grad():
        got = post(*run_graph_on_cpu(result.graph, list(pre(ids, x))))
        want = result.run(ids, x)
    assert_identical(tuple(got), tuple(want))


def test_checked_embedding_label_stays_data_and_still_checks_ids(stages):
    data, tensors = stage_to_data(stages["tagger_pre"], "tagger_pre")
    hostile = "'); import os; os.system('echo pwned') #\"\n"
    for node in data["nodes"]:
        if node.get("target") == "pybuda.checked_embedding":
            node["kwargs"]["label"] = hostile
    loaded = stage_from_data(json.loads(json.dumps(data)), tensors)
    ids, x = tagger_inputs()
    ids[0, 0] = VOCAB + 3
    with pytest.raises(InputError) as info:
        loaded(ids, x)
    assert str(info.value).startswith(hostile)


def test_value_encoding_round_trips_exactly():
    """slice, Ellipsis, device, layout, memory_format, nan/-0.0, list vs tuple on a hand-built graph."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    aten = torch.ops.aten

    def call(name, target, args, kwargs=None):
        return g.create_node("call_function", target, args, kwargs or {}, name=name)

    z = call("zeros", aten.zeros.default, ([2, 3],), {"dtype": torch.float32, "layout": torch.strided,
                                                     "device": torch.device("cpu"), "pin_memory": False})
    c = call("clone", aten.clone.default, (x,), {"memory_format": torch.contiguous_format})
    s = call("getitem", operator.getitem, (c, (slice(None, 1, None), Ellipsis)))
    n = call("mul_nan", aten.mul.Tensor, (s, float("nan")))
    m = call("mul_zero", aten.mul.Tensor, (x, -0.0))
    p = call("permute", aten.permute.default, (m, [1, 0]))
    big = call("add_big", aten.add.Tensor, (z, 2 ** 62))
    g.output((z, n, p, big, 1e-300, float("inf"), None, "text"))
    gm = torch.fx.GraphModule(nn.Module(), g)
    loaded, data = round_trip(gm, "values")
    nodes = {n["name"]: n for n in data["nodes"]}
    assert nodes["zeros"]["kwargs"]["device"] == {"t": "device", "v": "cpu"}
    assert nodes["getitem"]["args"][1] == {"t": "tuple", "v": [
        {"t": "slice", "v": [None, 1, None]}, {"t": "ellipsis", "v": None}]}
    assert nodes["permute"]["args"][1] == [1, 0]
    old_calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    for old, (name, target, args, kwargs) in zip(old_calls, loaded.calls()):
        assert old.name == name and old.target is target
        assert repr(old.args) == repr(args) and repr(old.kwargs) == repr(kwargs)
        assert type(args) is tuple
    (perm_args,) = [c[2] for c in loaded.calls() if c[0] == "permute"]
    assert isinstance(perm_args[1], list)
    inp = torch.randn(2, 3)
    got, want = loaded(inp), gm(inp)
    assert_identical(tuple(t for t in got if isinstance(t, torch.Tensor)),
                     tuple(t for t in want if isinstance(t, torch.Tensor)))
    assert got[4:6] == (1e-300, float("inf")) and got[6:] == (None, "text")
    assert str(torch.signbit(got[2]).all().item()) == str(torch.signbit(want[2]).all().item())


# --- loading in a fresh process -------------------------------------------------------------------
LOADER = textwrap.dedent("""
    import builtins, importlib.abc, json, pathlib, pickle, sys

    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("test_fx_serde", "tests", "conftest", "frontend"):
                raise ImportError("the model's module must not be imported: " + name)
            return None

    sys.meta_path.insert(0, Blocker())

    def refuse(*a, **k):
        raise AssertionError("loading a stage must not unpickle")

    pickle.load = pickle.loads = pickle.Unpickler = refuse
    import torch
    torch.load = refuse
    import safetensors.torch
    from pybuda.frontend.fx_serde import stage_from_data

    folder = pathlib.Path(sys.argv[1])
    outputs = {}
    for name in sys.argv[2:]:
        data = json.loads((folder / (name + ".json")).read_text())
        tensors = safetensors.torch.load((folder / (name + ".safetensors")).read_bytes())
        inputs = safetensors.torch.load((folder / (name + ".inputs.safetensors")).read_bytes())
        stage = stage_from_data(data, tensors)
        with torch.no_grad():
            out = stage(*[inputs[str(i)] for i in range(len(inputs))])
        assert isinstance(out, tuple)
        outputs.update({name + "." + str(i): t.contiguous() for i, t in enumerate(out)})
    assert not any(m.startswith(("test_fx_serde", "tests.")) for m in sys.modules), "test module imported"
    (folder / "outputs.safetensors").write_bytes(safetensors.torch.save(outputs))
""")


def test_fresh_process_loads_and_runs_stages(stages, tmp_path):
    names = ["tagger_pre", "tagger_post", "sort_pre", "sort_post"]
    expected = {}
    for name in names:
        gm = stages[name]
        data, tensors = stage_to_data(gm, name)
        (tmp_path / f"{name}.json").write_text(json.dumps(data, allow_nan=False))
        (tmp_path / f"{name}.safetensors").write_bytes(safetensors.torch.save(tensors))
        inputs = random_inputs(gm, 7)
        (tmp_path / f"{name}.inputs.safetensors").write_bytes(
            safetensors.torch.save({str(i): t for i, t in enumerate(inputs)}))
        with torch.no_grad():
            expected.update({f"{name}.{i}": t for i, t in enumerate(gm(*inputs))})
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run([sys.executable, "-c", LOADER, str(tmp_path), *names], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = safetensors.torch.load((tmp_path / "outputs.safetensors").read_bytes())
    assert sorted(got) == sorted(expected)
    for key, want in expected.items():
        torch.testing.assert_close(got[key], want, rtol=0, atol=0, equal_nan=True)


# --- hostile or malformed data --------------------------------------------------------------------
def set_target(target):
    def mutate(data, tensors):
        node = next(n for n in data["nodes"] if n.get("target") == "pybuda.checked_embedding")
        node["target"] = target
    return mutate


def refer_to_later_node(data, tensors):
    # the embedding reads the output of the node after it
    nodes = data["nodes"]
    i = next(i for i, n in enumerate(nodes) if n.get("target") == "pybuda.checked_embedding")
    nodes[i]["args"][0] = {"t": "node", "v": nodes[i + 1]["name"]}


def refer_to_unknown_node(data, tensors):
    next(n for n in data["nodes"] if n["op"] == "call_function")["args"][0] = {"t": "node", "v": "nowhere"}


def wrong_shape(data, tensors):
    tensors["emb_weight"] = torch.zeros(VOCAB + 1, 8)


def wrong_dtype(data, tensors):
    tensors["emb_weight"] = tensors["emb_weight"].double()


def missing_tensor(data, tensors):
    del tensors["emb_weight"]


def unknown_top_key(data, tensors):
    data["code"] = "import os"


def unknown_node_key(data, tensors):
    data["nodes"][0]["module"] = "os"


def unknown_tag_key(data, tensors):
    node = next(n for n in data["nodes"] if n["op"] == "call_function")
    node["args"][0]["extra"] = 1


def unknown_tag(data, tensors):
    node = next(n for n in data["nodes"] if n["op"] == "call_function")
    node["args"][0] = {"t": "pickle", "v": "gASV"}


def unknown_node_kind(data, tensors):
    data["nodes"][2]["op"] = "call_module"


def bad_node_name(data, tensors):
    data["nodes"][0]["name"] = "x; import os"


def bad_kwarg_name(data, tensors):
    node = next(n for n in data["nodes"] if n.get("target") == "pybuda.checked_embedding")
    node["kwargs"]["label=__import__('os').system('true'), x"] = 1


def untagged_float(data, tensors):
    node = next(n for n in data["nodes"] if n.get("target") == "pybuda.checked_embedding")
    node["args"].append(1.5)


def bad_dtype_value(data, tensors):
    data["tensors"]["emb_weight"]["dtype"] = "FloatStorage"


def nodes_not_a_list(data, tensors):
    data["nodes"] = {"0": data["nodes"][0]}


def node_after_output(data, tensors):
    data["nodes"].append({"op": "placeholder", "name": "late"})


def no_output(data, tensors):
    data["nodes"].pop()


def set_version(v):
    def mutate(data, tensors):
        data["version"] = v
    return mutate


HOSTILE = {
    "builtins.eval": (set_target("builtins.eval"), "not an allowed op name"),
    "os.system": (set_target("os.system"), "not an allowed op name"),
    "aten.__class__": (set_target("aten.__class__"), "not an allowed op name"),
    "aten.__class__.default": (set_target("aten.__class__.default"), "not an allowed op name"),
    "aten.add.__dict__": (set_target("aten.add.__dict__"), "not an allowed op name"),
    "extra dots": (set_target("aten.embedding.default.extra"), "not an allowed op name"),
    "torch.ops prefix": (set_target("torch.ops.aten.embedding.default"), "not an allowed op name"),
    "attribute of the namespace": (set_target("aten.name.default"), "no such op"),
    "unknown op": (set_target("aten.no_such_op_xyz.default"), "no such op"),
    "unknown overload": (set_target("aten.embedding.NoSuchOverload"), "no such op"),
    "target not a string": (set_target(["aten", "embedding"]), "target must be a string"),
    "later node": (refer_to_later_node, "not defined before it"),
    "unknown node": (refer_to_unknown_node, "not defined before it"),
    "wrong shape": (wrong_shape, r"torch.float32 \[20, 8\]"),
    "wrong dtype": (wrong_dtype, "stored tensor is torch.float64"),
    "missing tensor": (missing_tensor, "missing from the stored tensors"),
    "unknown top-level key": (unknown_top_key, r"unknown key\(s\) \['code'\]"),
    "unknown node key": (unknown_node_key, r"unknown key\(s\) \['module'\]"),
    "unknown tagged-value key": (unknown_tag_key, r"unknown key\(s\) \['extra'\]"),
    "unknown tag": (unknown_tag, "unknown value tag 'pickle'"),
    "unknown node kind": (unknown_node_kind, "unknown or missing node kind 'call_module'"),
    "bad node name": (bad_node_name, "malformed node name"),
    "bad kwarg name": (bad_kwarg_name, "malformed keyword argument name"),
    "untagged float": (untagged_float, "floats must be tagged"),
    "bad dtype": (bad_dtype_value, "unsupported dtype"),
    "nodes not a list": (nodes_not_a_list, "'nodes' must be a list"),
    "node after output": (node_after_output, "node after the output node"),
    "no output": (no_output, "no output node"),
    "version 2": (set_version(2), "unsupported format version 2"),
    "version '1'": (set_version("1"), "unsupported format version '1'"),
    "version true": (set_version(True), "unsupported format version True"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_data_is_refused(stages, case):
    mutate, message = HOSTILE[case]
    data, tensors = stage_to_data(stages["tagger_pre"], "tagger_pre")
    data = json.loads(json.dumps(data))
    tensors = dict(tensors)
    mutate(data, tensors)
    with pytest.raises(ImageError, match=message):
        stage_from_data(data, tensors)


def test_unmodified_data_loads(stages):
    """The hostile cases above mutate this, which loads fine as is."""
    data, tensors = stage_to_data(stages["tagger_pre"], "tagger_pre")
    stage_from_data(copy.deepcopy(data), tensors)


def test_not_a_dict_is_refused():
    with pytest.raises(ImageError, match="expected an object"):
        stage_from_data([1, 2], {})


# --- what cannot be saved -------------------------------------------------------------------------
class WithSubmodule(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(4, 4)

    def forward(self, x):
        return (self.inner(x),)


def test_call_module_is_refused_at_save_naming_the_node():
    gm = torch.fx.symbolic_trace(WithSubmodule())
    with pytest.raises(ImageError, match=r"stage 'sub', node 'inner' \(call_module 'inner'\).*'call_module'"):
        stage_to_data(gm, "sub")


def test_get_attr_of_a_submodule_is_refused_at_save():
    root = nn.Module()
    root.body = nn.Linear(4, 4)
    g = torch.fx.Graph()
    x = g.placeholder("x")
    body = g.get_attr("body")
    g.output((x, body))
    with pytest.raises(ImageError, match=r"node 'body'.*submodule \(Linear"):
        stage_to_data(torch.fx.GraphModule(root, g), "hop")


def test_call_method_is_refused_at_save():
    class M(nn.Module):
        def forward(self, x):
            return (x.relu(),)

    with pytest.raises(ImageError, match=r"node 'relu'.*'call_method'"):
        stage_to_data(torch.fx.symbolic_trace(M()), "meth")


def test_real_stage_with_a_custom_op_is_stored_as_its_aten_ops():
    result = capture(CustomTail().eval(), (torch.randn(2, 8),))
    loaded, data = round_trip(result.post, "tail")
    assert targets(data) == ["aten.mul.Tensor", "aten.sub.Tensor", "aten.linear.default"]
    assert any(n.target is torch.ops.pybuda_fxserde_test.odd.default for n in result.post.graph.nodes)  # the in-memory stage keeps it
    inputs = random_inputs(result.post, 1)
    assert_identical(loaded(*inputs), result.post(*inputs))


def test_real_stage_with_a_value_dependent_custom_op_is_refused_at_save():
    result = capture(CustomTail(flip_negative_rows).eval(), (torch.randn(2, 8),))
    with pytest.raises(ImageError, match=r"stage 'tail', node 'flip_negative_rows' \(pybuda_fxserde_test."
                                         r"flip_negative_rows.default\): op is not in the allow-list .* cannot be "
                                         r"decomposed .*: its implementation depends on the values"):
        stage_to_data(result.post, "tail")


def hand_stage(target, *args, root=None, **kwargs):
    g = torch.fx.Graph()
    x = g.placeholder("x")
    g.output((g.create_node("call_function", target, (x, *args), kwargs, name="op"),))
    return torch.fx.GraphModule(root or nn.Module(), g)


@pytest.mark.parametrize("target, args, message", [
    (torch.ops.aten.add.Scalar, (1j,), r"node 'op' \(aten.add.Scalar\): cannot store an argument of type "
                                       r"builtins.complex"),
    (torch.add, (1.0,), r"node 'op' \(torch.*add\): op is not in the allow-list"),
    (torch.ops.aten.add, (1.0,), "op is not in the allow-list"),  # a packet, not an overload
    (torch.ops.aten.__and__.Tensor, (1,), r"aten.__and__.Tensor\): op is not in the allow-list"),
    (torch.ops.aten.add.Tensor, ({"a": 1},), "cannot store an argument of type .*immutable_dict"),
])
def test_unstorable_targets_and_arguments_are_refused(target, args, message):
    with pytest.raises(ImageError, match=message):
        stage_to_data(hand_stage(target, *args), "hand")


@pytest.mark.parametrize("make, message", [
    (lambda: torch.eye(3).to_sparse(), "sparse_coo"),
    (lambda: torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.quint8), "quantized"),
    (lambda: torch.ones(3, device="meta"), "meta device"),
])
def test_unstorable_tensors_are_refused(make, message):
    root = nn.Module()
    root.register_buffer("w", make())
    g = torch.fx.Graph()
    x = g.placeholder("x")
    w = g.get_attr("w")
    g.output((x, w))
    with pytest.raises(ImageError, match=rf"stage 'bad', node 'w'.*{message}"):
        stage_to_data(torch.fx.GraphModule(root, g), "bad")


def test_non_contiguous_and_shared_tensors_are_stored_as_copies():
    base = torch.arange(12.0).reshape(3, 4)
    root = nn.Module()
    root.register_buffer("t", base.t())  # non-contiguous view
    root.register_buffer("u", base)  # shares its storage
    g = torch.fx.Graph()
    x = g.placeholder("x")
    t, u = g.get_attr("t"), g.get_attr("u")
    g.output((g.call_function(torch.ops.aten.add.Tensor, (x, t)), u))
    gm = torch.fx.GraphModule(root, g)
    loaded, _ = round_trip(gm, "views")  # safetensors refuses shared or non-contiguous tensors
    inp = torch.randn(4, 3)
    assert_identical(loaded(inp), gm(inp))



def test_node_names_clashing_with_generated_code_still_run():
    """Names like self/torch/inf/input are data: the rebuilt stage renames them internally."""
    def ref(name):
        return {"t": "node", "v": name}

    data = {"format": "pybuda.fx_stage", "version": 1, "name": "clash", "tensors": {"w": {"dtype": "float32",
                                                                                          "shape": [2]}},
            "nodes": [{"op": "placeholder", "name": "self"}, {"op": "placeholder", "name": "torch"},
                      {"op": "placeholder", "name": "input"}, {"op": "get_attr", "name": "getattr", "tensor": "w"},
                      {"op": "call_function", "name": "inf", "target": "aten.add.Tensor",
                       "args": [ref("self"), ref("torch")], "kwargs": {"alpha": 2}},
                      {"op": "call_function", "name": "operator", "target": "aten.mul.Tensor",
                       "args": [ref("inf"), ref("getattr")], "kwargs": {}},
                      {"op": "call_function", "name": "w", "target": "aten.sub.Tensor",
                       "args": [ref("operator"), ref("input")], "kwargs": {}},
                      {"op": "output", "name": "output", "value": {"t": "tuple", "v": [ref("w"), ref("inf")]}}]}
    w = torch.tensor([3.0, -1.0])
    stage = stage_from_data(data, {"w": w})
    a, b, c = torch.randn(2), torch.randn(2), torch.randn(2)
    assert_identical(stage(a, b, c), ((a + 2 * b) * w - c, a + 2 * b))
