"""The netlist is the backend's contract: the golden device and the performance model read the netlist, the
host-I/O record and named tensors — never the compiler's code or in-memory state (DESIGN.md, Contracts)."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import pybuda
from pybuda.compile import compile_graph
from pybuda.config import CompilerConfig
from pybuda.errors import InputError
from pybuda.golden.executor import GoldenExecutor, create_executor, executor_inputs
from pybuda.netlist import to_yaml
from pybuda.netlist.host_io import HostIO, HostTM, ParameterIO, QueueIO, from_device_layout, to_device_layout
from pybuda.netlist.parse import parse_yaml
from pybuda.passes.lowered.buda_eval import evaluate_buda_graph
from tests.import_graph import imported_names

PACKAGE_DIR = os.path.dirname(pybuda.__file__)
REPO_ROOT = os.path.dirname(PACKAGE_DIR)
BACKEND = ("golden", "perf")
COMPILER = ("pybuda.passes", "pybuda.ir", "pybuda.frontend", "pybuda.runtime", "pybuda.compile")


def _param(shape, seed, scale=0.2):
    return pybuda.Parameter(torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale,
                            requires_grad=False)


class HostSide(pybuda.PyBudaModule):
    """An input TM and an output reshape the host applies, a weight transpose folded at compile time (consteval),
    a bias the lowering replicates, and a parameter the device reads as it is."""

    def __init__(self, name="host_side"):
        super().__init__(name)
        self.w = _param((48, 64), 1)
        self.b = _param((48,), 2)
        self.scale = _param((32, 48), 3, 1.0)

    def forward(self, x):
        h = pybuda.op.Matmul("mm", pybuda.op.Transpose("xt", x, -1, -2), pybuda.op.Transpose("wt", self.w, -1, -2))
        h = pybuda.op.Gelu("gelu", pybuda.op.Add("add", h, self.b))
        h = pybuda.op.Multiply("mul", h, self.scale)
        return pybuda.op.Reshape("flat", h, (x.shape[0], 32 * 48))


def _compile(tmp_path, microbatch=2, fast=False):
    x = [torch.randn(microbatch, 64, 32, generator=torch.Generator().manual_seed(7))]
    graph, _ = HostSide().trace(*x)
    cfg = CompilerConfig()
    cfg.backend_output_dir = str(tmp_path)
    cfg.golden_ignore_df_precision = fast
    return compile_graph(graph, "wh_n150", cfg, None, microbatch), x


# --- imports ---------------------------------------------------------------------------------------------------


def _imported_modules(path, package=None):
    """Every module an import in ``path`` names, lazy ones included (relative imports resolved against
    ``package``, by default the file's own)."""
    if package is None:
        package = ".".join(["pybuda"] + os.path.relpath(os.path.dirname(path), PACKAGE_DIR).split(os.sep))
    return imported_names(path, f"{package}.{os.path.basename(path)[:-3]}")


def _backend_files():
    for sub in BACKEND:
        for dirpath, _, files in os.walk(os.path.join(PACKAGE_DIR, sub)):
            for name in sorted(files):
                if name.endswith(".py"):
                    yield os.path.join(dirpath, name)


def _reaches_compiler(name):
    return any(name == c or name.startswith(c + ".") for c in COMPILER)


def test_golden_and_perf_import_no_compiler_code():
    files = list(_backend_files())
    assert len(files) > 8
    bad = {os.path.relpath(p, REPO_ROOT): sorted({n for n in _imported_modules(p) if _reaches_compiler(n)})
           for p in files}
    bad = {k: v for k, v in bad.items() if v}
    assert bad == {}, f"backend modules import compiler/frontend/runtime code: {bad}"


def test_the_import_check_sees_function_level_and_relative_imports(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import torch\n\n\ndef f():\n    from pybuda.passes.context import CompileContext\n\n\n"
                     "class C:\n    def g(self):\n        from ..ir import lowered\n        import pybuda.runtime.api\n")
    flagged = {n for n in _imported_modules(str(probe), package="pybuda.golden") if _reaches_compiler(n)}
    assert flagged == {"pybuda.passes.context", "pybuda.passes.context.CompileContext", "pybuda.ir",
                       "pybuda.ir.lowered", "pybuda.runtime.api"}


def test_a_fresh_process_running_the_backend_loads_no_compiler_module():
    code = textwrap.dedent("""
        import sys
        import pybuda.golden.executor, pybuda.golden.device, pybuda.perf.model, pybuda.netlist.parse
        import pybuda.netlist.host_io
        print(sorted(m for m in sys.modules if m.startswith(("pybuda.passes", "pybuda.ir", "pybuda.frontend",
                                                             "pybuda.runtime", "pybuda.compile", "pybuda.balancer",
                                                             "pybuda.placer"))))
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


# --- the host-I/O record ---------------------------------------------------------------------------------------


def test_host_io_json_round_trip_of_a_hand_made_record():
    rec = HostIO(graph="g", microbatch=4, inputs=[
        QueueIO("x", "input", "x", (4, 3, 5), (1, 5, 3), "float32", True,
                [HostTM("transpose", {"dim0": -1, "dim1": -2}), ("reshape", {"shape": [4, 5, 3]})])],
        outputs=[QueueIO("out", "output", "y", (4, 15), (1, 5, 3), "int64", True, [HostTM("reshape", {"shape": (4, 15)})])],
        ram_queues=[QueueIO("w", "parameter", "w", (5, 5), (5, 5), tensor="w")],
        parameters=[ParameterIO("w", (5, 5)), ParameterIO("v", (5,), "float32", "v#framework")],
        consteval={"vt": ["v"]})
    text = json.dumps(rec.to_dict())
    back = HostIO.from_dict(json.loads(text))
    assert back == rec
    assert back.inputs[0].host_tms[1].attrs == {"shape": (4, 5, 3)}  # lists and tuples read back alike
    assert back.transformed_parameters() == {"vt", "v"}
    assert back.tensor_names() == ["w", "v#framework"]
    with pytest.raises(ValueError, match="version"):
        HostIO.from_dict({**rec.to_dict(), "version": 99})
    with pytest.raises(ValueError, match="no JSON form"):
        HostTM("reshape", {"shape": torch.Size([2, 3]), "bad": object()}).to_dict()


def test_host_layout_round_trip_through_the_record():
    rec = QueueIO("x", "input", "x", (3, 4, 40), (1, 40, 4), batched=True,
                  host_tms=[HostTM("transpose", {"dim0": -1, "dim1": -2})])
    value = torch.randn(3, 4, 40)
    data = to_device_layout(rec, value)
    assert tuple(data.shape) == (3, 1, 64, 32)  # one padded entry per sample
    out = QueueIO("x", "output", "x", (3, 4, 40), (1, 40, 4), batched=True,
                  host_tms=[HostTM("transpose", {"dim0": -1, "dim1": -2})])
    assert torch.equal(from_device_layout(out, data), value)


def test_the_compiler_writes_the_record_beside_the_netlist(tmp_path):
    results, _ = _compile(tmp_path)
    rec = results.host_io
    assert isinstance(rec, HostIO) and rec.microbatch == 2 and rec.program in {p.name for p in results.netlist.programs}
    with open(results.artifacts["host_io"]) as f:
        assert HostIO.from_dict(json.load(f)) == rec
    assert os.path.dirname(results.artifacts["host_io"]) == os.path.dirname(results.artifacts["netlist"])
    (inp,), (out,) = rec.inputs, rec.outputs
    assert inp.batched and [tm.op_type for tm in inp.host_tms] == ["transpose"]
    assert [tm.op_type for tm in out.host_tms] == ["reshape"] and out.name == results.initial_graph.outputs[0].name
    assert {q.queue for q in rec.ram_queues} == {q.name for q in results.netlist.queues.values() if q.type == "ram"}
    assert set(rec.consteval) and "host_side.w" in rec.transformed_parameters()
    assert {p.name for p in rec.parameters} == {"host_side.w", "host_side.b", "host_side.scale"}
    scale = next(p for p in rec.parameters if p.name == "host_side.scale")
    assert scale.tensor == "host_side.scale"  # stored once: the queue holds the framework value unchanged


# --- running from the contract alone ---------------------------------------------------------------------------


@pytest.mark.parametrize("fast", [False, True])
def test_executor_from_yaml_json_and_tensors_matches_the_in_memory_run_bit_for_bit(tmp_path, fast):
    results, x = _compile(tmp_path, fast=fast)
    expected = create_executor(results).run(x)
    netlist, host_io, tensors = executor_inputs(results)
    assert set(tensors) == set(host_io.tensor_names())
    from_text = GoldenExecutor(parse_yaml(to_yaml(netlist)), HostIO.from_dict(json.loads(json.dumps(host_io.to_dict()))),
                               {k: v.clone() for k, v in tensors.items()}, fast=fast)
    got = from_text.run(x)
    assert len(got) == len(expected) and all(torch.equal(a, b) for a, b in zip(got, expected))
    assert from_text.get_parameters().keys() == {p.name for p in host_io.parameters}


def test_building_the_device_trims_the_heap_as_weights_are_written(tmp_path, monkeypatch):
    # The heap is told to keep what runs free before the weights are written (pybuda.golden.heap); the
    # weights' temporaries are handed back to the system every TRIM_EVERY_BYTES of weights written and
    # once at the end; the results do not change.
    from pybuda.golden import executor as golden_executor
    from pybuda.golden import heap

    results, x = _compile(tmp_path)
    expected = create_executor(results).run(x)
    trims = []
    monkeypatch.setattr(heap, "release_free_memory", lambda: trims.append(1))
    monkeypatch.setattr(heap, "keep_freed_memory", lambda: trims.append("keep"))
    monkeypatch.setattr(golden_executor, "TRIM_EVERY_BYTES", 1)
    got = GoldenExecutor(*executor_inputs(results)).run(x)
    assert trims == ["keep"] + [1] * (len(results.host_io.ram_queues) + 1)
    assert all(torch.equal(a, b) for a, b in zip(got, expected))
    monkeypatch.undo()
    heap.release_free_memory()  # callable for real (glibc's malloc_trim, or nothing)


def test_a_fresh_process_runs_the_stored_netlist_record_and_tensors(tmp_path):
    safetensors_torch = pytest.importorskip("safetensors.torch")
    results, x = _compile(tmp_path)
    expected = create_executor(results).run(x)
    netlist, host_io, tensors = executor_inputs(results)
    image = tmp_path / "image"
    image.mkdir()
    (image / "netlist.yaml").write_text(to_yaml(netlist))
    (image / "host_io.json").write_text(json.dumps(host_io.to_dict()))
    safetensors_torch.save_file({k: v.contiguous() for k, v in tensors.items()}, str(image / "tensors.safetensors"))
    safetensors_torch.save_file({"x": x[0]}, str(image / "inputs.safetensors"))
    code = textwrap.dedent(f"""
        import json, sys
        from safetensors.torch import load_file, save_file
        from pybuda.golden.executor import GoldenExecutor
        from pybuda.netlist.host_io import HostIO
        from pybuda.netlist.parse import parse_yaml
        root = {str(image)!r}
        netlist = parse_yaml(open(root + "/netlist.yaml").read())
        host_io = HostIO.from_dict(json.load(open(root + "/host_io.json")))
        executor = GoldenExecutor(netlist, host_io, load_file(root + "/tensors.safetensors"))
        outs = executor.run([load_file(root + "/inputs.safetensors")["x"]])
        save_file({{str(i): o.contiguous() for i, o in enumerate(outs)}}, root + "/outputs.safetensors")
        assert not [m for m in sys.modules if m.startswith(("pybuda.passes", "pybuda.ir", "pybuda.frontend"))]
    """)
    subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, check=True, capture_output=True, text=True)
    got = safetensors_torch.load_file(str(image / "outputs.safetensors"))
    assert all(torch.equal(got[str(i)], e) for i, e in enumerate(expected))


def test_parameters_transformed_at_compile_time_are_not_updatable(tmp_path):
    results, x = _compile(tmp_path)
    executor = create_executor(results)
    params = executor.get_parameters()
    assert torch.equal(params["host_side.w"], results.initial_graph.tensors["host_side.w"])
    with pytest.raises(InputError, match="consteval"):
        executor.update_parameters({"host_side.w": torch.zeros(48, 64)})
    with pytest.raises(InputError, match="no device parameter named 'nope'"):
        executor.update_parameters({"nope": torch.zeros(1)})
    with pytest.raises(InputError, match="has shape"):
        executor.update_parameters({"host_side.scale": torch.zeros(3)})
    before = executor.run(x)[0]
    executor.update_parameters({"host_side.scale": 2 * params["host_side.scale"]})
    assert torch.allclose(executor.run(x)[0], 2 * before, rtol=2e-2, atol=1e-3)  # bfloat16 storage


def test_the_lowered_graph_check_is_the_goldens_float32_mode(tmp_path):
    results, x = _compile(tmp_path, fast=True)
    lowered = evaluate_buda_graph(results.lowered_graph, dict(zip(results.lowered_graph.input_order, x)))
    on_device = create_executor(results).run(x)
    for name, got in zip(results.lowered_graph.output_order, on_device):
        assert torch.allclose(lowered[name], got, rtol=1e-5, atol=1e-5)
