"""CompilerConfig and the override APIs."""

import pytest

import pybuda
from pybuda.config import CompileDepth, _get_global_compiler_config
from pybuda.errors import ConfigError


def test_set_configuration_options_maps_reference_keywords():
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Bfp8_b, accumulate_df="Float16_b",
                                     math_fidelity=pybuda.MathFidelity.LoFi, balancer_policy="Ribbon",
                                     harvested_rows=[2, 5], device_config="wh_n150", place_on_one_row=True)
    cfg = _get_global_compiler_config()
    assert cfg.default_df_override == pybuda.DataFormat.Bfp8_b
    assert cfg.default_accumulate_df == pybuda.DataFormat.Float16_b
    assert cfg.default_math_fidelity == pybuda.MathFidelity.LoFi
    assert cfg.balancer_policy == "Ribbon" and cfg.harvested_rows == [2, 5]
    # NoC rows 5 and 2 are Grayskull's logical harvest indices 0 and 6.
    assert cfg.resolved_harvesting_mask("grayskull") == (1 << 0) | (1 << 6)
    with pytest.raises(ConfigError, match="cannot be harvested"):
        pybuda.set_configuration_options(harvested_rows=[6])
        _get_global_compiler_config().resolved_harvesting_mask("grayskull")
    assert cfg.device_config == "wh_n150"


def test_unknown_options_are_rejected():
    # tt-buda#68: users passed documented-but-nonexistent options and got a confusing failure.
    with pytest.raises(ConfigError, match="compute_precision"):
        pybuda.set_configuration_options(compute_precision="fp16")
    with pytest.raises(ConfigError, match="balancer_policy"):
        pybuda.set_configuration_options(balancer_policy="Fastest")
    with pytest.raises(ConfigError, match="device_config"):
        pybuda.set_configuration_options(device_config="gs_e999")


def test_overrides_edit_the_global_config():
    pybuda.override_op_size("mm", (2, 4))
    pybuda.set_epoch_break("softmax_3")
    pybuda.set_chip_break(["a", "b"])
    pybuda.config.override_u_kt("mm", 4)
    pybuda.configure_mixed_precision(op_type="add", output_df=pybuda.DataFormat.Float16_b)
    cfg = _get_global_compiler_config()
    assert cfg.balancer_op_overrides["mm"].grid_shape == (2, 4) and cfg.balancer_op_overrides["mm"].u_kt == 4
    assert cfg.op_names_to_epoch_break == ["softmax_3"] and cfg.op_names_to_chip_break == [["a", "b"]]  # a list: break at its first op
    assert cfg.amp_properties[0].matches("add_1", "add") and not cfg.amp_properties[0].matches("m", "multiply")
    with pytest.raises(ConfigError):
        pybuda.override_op_size("mm", (0, 4))
    with pytest.raises(ConfigError):
        pybuda.configure_mixed_precision(name_regex="(unclosed")


def test_compile_depth_from_env(monkeypatch):
    monkeypatch.setenv("PYBUDA_COMPILE_DEPTH", "balancer_pass")
    assert pybuda.CompilerConfig().compile_depth == CompileDepth.BALANCER_PASS
    monkeypatch.setenv("PYBUDA_COMPILE_DEPTH", "bogus")
    with pytest.raises(ConfigError):
        pybuda.CompilerConfig()


def test_snapshot_is_independent_and_serialisable():
    cfg = _get_global_compiler_config()
    snap = cfg.snapshot()
    cfg.op_names_to_epoch_break.append("x")
    assert snap.op_names_to_epoch_break == []
    d = snap.to_dict()
    assert d["default_math_fidelity"] == "HiFi3" and d["compile_depth"] == "FULL"


def test_harvested_rows_reach_the_compiled_device():
    from pybuda.compile import resolve_device

    pybuda.set_configuration_options(device_config="gs_e150")
    assert resolve_device(None, _get_global_compiler_config()).grid_size == (10, 12)
    pybuda.set_configuration_options(harvested_rows=[2, 5])
    device = resolve_device(None, _get_global_compiler_config())
    assert device.grid_size == (8, 12) and set(device.harvested_noc_rows) == {2, 5}


def _matmul_graph():
    import torch
    from seed_modules import BudaMatmul

    module = BudaMatmul("mm_env")
    module.set_parameter("mm_env.weights", torch.randn(1, 1, 32, 32))
    graph, _ = module.trace(torch.randn(1, 1, 32, 32))
    return graph


def _out_dfs(results):
    """Output formats of the matmuls (ops feeding the host may keep a wider format)."""
    return {op.out_df for op in results.lowered_graph.ops.values() if op.type == "matmul"}


def test_an_explicit_config_beats_the_environment(monkeypatch, tmp_path):
    from pybuda.compile import compile_graph
    from pybuda.config import CompilerConfig

    monkeypatch.setenv("PYBUDA_BUILD_DIR", str(tmp_path))
    monkeypatch.setenv("PYBUDA_DEFAULT_DF", "Bfp8_b")
    monkeypatch.setenv("PYBUDA_BALANCER_POLICY_TYPE", "MinimizeGrid")
    graph = _matmul_graph()
    explicit = CompilerConfig(default_df_override=pybuda.DataFormat.Float16, balancer_policy="Ribbon")
    r = compile_graph(graph, "wh_n150", explicit)
    assert r.config.default_df_override == pybuda.DataFormat.Float16 and r.config.balancer_policy == "Ribbon"
    assert _out_dfs(r) == {pybuda.DataFormat.Float16} and r.summary.balancer_policy == "Ribbon"
    # A field set after the config was created wins too: compiles do not read the environment again.
    later = CompilerConfig()
    assert later.default_df_override == pybuda.DataFormat.Bfp8_b  # fields not passed take the environment
    later.default_df_override = pybuda.DataFormat.Float16
    assert compile_graph(graph, "wh_n150", later).config.default_df_override == pybuda.DataFormat.Float16


def test_the_environment_applies_to_the_global_config_once(monkeypatch, tmp_path):
    from pybuda.compile import compile_graph
    from pybuda.config import _clear_global_compiler_config

    monkeypatch.setenv("PYBUDA_BUILD_DIR", str(tmp_path))
    monkeypatch.setenv("PYBUDA_DEFAULT_DF", "Bfp8_b")
    monkeypatch.setenv("PYBUDA_BALANCER_POLICY_TYPE", "MinimizeGrid")
    _clear_global_compiler_config()
    graph = _matmul_graph()
    r = compile_graph(graph, "wh_n150")
    assert r.config.default_df_override == pybuda.DataFormat.Bfp8_b and r.config.balancer_policy == "MinimizeGrid"
    assert _out_dfs(r) == {pybuda.DataFormat.Bfp8_b}
    # set_configuration_options edits the global config after the environment applied: it wins.
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float16_b, balancer_policy="Ribbon")
    r = compile_graph(graph, "wh_n150")
    assert r.config.default_df_override == pybuda.DataFormat.Float16_b and r.config.balancer_policy == "Ribbon"
    # A reset creates the global config again, from the environment.
    pybuda.pybuda_reset()
    assert _get_global_compiler_config().default_df_override == pybuda.DataFormat.Bfp8_b


def test_pybuda_compile_keeps_an_explicit_config(monkeypatch, tmp_path):
    import torch
    from seed_modules import BudaMatmul

    from pybuda.compile import pybuda_compile
    from pybuda.config import CompilerConfig

    monkeypatch.setenv("PYBUDA_BUILD_DIR", str(tmp_path))
    monkeypatch.setenv("PYBUDA_DEFAULT_DF", "Bfp8_b")
    module = BudaMatmul("mm_env")
    module.set_parameter("mm_env.weights", torch.randn(1, 1, 32, 32))
    cfg = CompilerConfig(default_df_override=pybuda.DataFormat.Float16_b, device_config="wh_n150")
    r = pybuda_compile(module, "mm_env", torch.randn(1, 1, 32, 32), compiler_cfg=cfg)
    assert _out_dfs(r) == {pybuda.DataFormat.Float16_b}


def test_bad_environment_values_are_config_errors(monkeypatch):
    monkeypatch.setenv("PYBUDA_AMP_LEVEL", "high")
    with pytest.raises(ConfigError, match="PYBUDA_AMP_LEVEL"):
        pybuda.CompilerConfig()
    assert pybuda.CompilerConfig(amp_level=1).amp_level == 1  # a passed field never reads its variable


def test_read_env_is_the_one_record_of_the_environment(monkeypatch):
    from pybuda.config import read_env, runtime_env

    monkeypatch.setenv("PYBUDA_GRAPH_NAME_SUFFIX", "_v2")
    monkeypatch.setenv("PYBUDA_FORCE_THREADS", "1")
    monkeypatch.setenv("PYBUDA_VERIFY_GOLDEN", "1")
    monkeypatch.setenv("PYBUDA_LOG_LEVEL", "info")
    monkeypatch.setenv("PYBUDA_DISABLE_OP_FUSING", "1")
    env = read_env()
    assert env.graph_name_suffix == "_v2" and env.runtime.force_threads and env.verify_golden
    assert env.log_level == "info" and env.config["PYBUDA_DISABLE_OP_FUSING"] == "1"
    assert runtime_env() == env.runtime
    assert pybuda.PyTorchModule("m", __import__("torch").nn.Identity()).name == "m_v2"
    assert pybuda.verify.VerifyConfig().run_golden is True
    assert pybuda.CompilerConfig().enable_auto_fusing is False


def test_only_config_reads_the_environment():
    """pybuda reads environment variables in pybuda/config.py (read_env) and nowhere else, so that an
    explicit config is never overridden behind the caller's back and every variable is listed in one place."""
    import ast
    import pathlib

    root = pathlib.Path(pybuda.__file__).parent
    offenders = []
    for path in sorted(root.rglob("*.py")):
        if path == root / "config.py":
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            hit = None
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "environb", "getenv", "getenvb") \
                    and isinstance(node.value, ast.Name) and node.value.id == "os":
                hit = f"os.{node.attr}"
            elif isinstance(node, ast.ImportFrom) and node.module == "os" and \
                    any(a.name in ("environ", "environb", "getenv", "getenvb") for a in node.names):
                hit = "from os import " + ", ".join(a.name for a in node.names)
            if hit:
                offenders.append(f"{path.relative_to(root.parent)}:{node.lineno}: {hit}")
    assert not offenders, "read the environment through pybuda.config.read_env():\n" + "\n".join(offenders)
