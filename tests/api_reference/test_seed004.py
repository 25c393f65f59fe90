"""Seed 004 (TT-Buda's API reference), name by name: each documented name is called as the reference
documents it and its effect is checked (a value computed, a state changed, an error raised).

The inventory lives in seed004_names.py; names that do not work today are in its MISSING (checked to be
still broken), training / device-image / non-PyTorch-frontend names in OUT_OF_SCOPE (existence only).
"""

import glob
import importlib
import inspect
import os
import queue
import re

import pytest
import torch

import pybuda
import pybuda.op
from pybuda import Parameter, Tensor

from seed004_names import MISSING, OUT_OF_SCOPE, OUT_OF_SCOPE_ABSENT, REFERENCE

SEED_GLOB = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "seeds", "004_*.txt")
SEED_CANDIDATES = sorted(glob.glob(SEED_GLOB)) or sorted(glob.glob("/work/shared/seeds/004_*.txt"))

# --------------------------------------------------------------------------------------------------
# Parsing the reference
# --------------------------------------------------------------------------------------------------
_SECTIONS = {"Python Runtime API": "pybuda", "Configuration and Placement": "pybuda", "Operations": "pybuda.op",
             "Module Types": "pybuda", "Device Types": "pybuda", "Miscellaneous": "pybuda"}
_SIG = re.compile(r"^(class\s+)?([A-Za-z_]\w*)(?:\((.*)\))?\s*$")
_PROPERTY = re.compile(r"^property\s+([A-Za-z_]\w*)\s*$")


def _param_names(args: str):
    parts, depth, cur = [], 0, ""
    for ch in args:
        depth += ch in "[(<{"
        depth -= ch in "])>}"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    names = []
    for part in parts:
        name = re.split(r"[:=]", part.strip(), maxsplit=1)[0].strip().lstrip("*").strip()
        if name and name != "self":
            names.append(name)
    return names


def parse_reference(text: str):
    """Dotted name -> documented parameter names, from ``name(args)``, ``class X(args)``, ``class X``,
    ``property x`` lines and enum ``Members:`` lists, section by section."""
    prefix, cls, in_members, found = None, None, False, {}
    for line in (raw.strip() for raw in text.splitlines()):
        if line in _SECTIONS:
            prefix, cls, in_members = _SECTIONS[line], None, False
            continue
        if prefix is None:
            continue
        if line == "Members:":
            in_members = True
            continue
        prop = _PROPERTY.match(line)
        if prop and cls:
            found[f"{prefix}.{cls}.{prop.group(1)}"] = []
            continue
        m = _SIG.match(line)
        if not m:
            in_members = False
            continue
        is_class, name, args = m.groups()
        if is_class:
            cls, in_members = name, False
            found[f"{prefix}.{name}"] = _param_names(args or "")
        elif args is None:
            if in_members and cls:
                found[f"{prefix}.{cls}.{name}"] = []
        else:
            in_members = False
            owner = f"{prefix}.{cls}" if cls and prefix == "pybuda" else prefix
            found[f"{owner}.{name}"] = _param_names(args)
    return found


@pytest.fixture(scope="module")
def parsed_reference():
    if not SEED_CANDIDATES:
        pytest.skip("seed 004 not available in this checkout")
    with open(SEED_CANDIDATES[0], encoding="utf-8") as f:
        return parse_reference(f.read())


def test_inventory_covers_reference(parsed_reference):
    assert len(parsed_reference) > 150
    missing = sorted(set(parsed_reference) - set(REFERENCE))
    assert not missing, f"names in seed 004 but not in the inventory: {missing}"


def test_inventory_parameters_match_reference(parsed_reference):
    wrong = {k: (REFERENCE.get(k), v) for k, v in parsed_reference.items() if REFERENCE.get(k) != v}
    assert not wrong


def test_inventory_lists_are_consistent():
    assert set(OUT_OF_SCOPE) <= set(REFERENCE)
    assert OUT_OF_SCOPE_ABSENT <= set(OUT_OF_SCOPE)
    assert set(MISSING) <= set(REFERENCE)
    assert not set(MISSING) & set(OUT_OF_SCOPE)
    assert set(REFERENCE) - set(OUT_OF_SCOPE) - set(MISSING) == set(EFFECTS) | set(OPS)


# --------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------
def resolve(dotted: str):
    parts = dotted.split(".")
    obj = importlib.import_module(parts[0])
    for p in parts[1:]:
        obj = getattr(obj, p)
    return obj


def close(got, want, atol=0.05, rtol=0.02):
    got = got.value() if isinstance(got, Tensor) else got
    assert tuple(got.shape) == tuple(want.shape), (tuple(got.shape), tuple(want.shape))
    assert torch.allclose(got.float(), want.float(), atol=atol, rtol=rtol), (got - want).abs().max()


def golden():
    return pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden)


def run_one(module, *inputs, device=None):
    """Compile ``module`` on a golden TTDevice and run one input; return the outputs (pybuda Tensors)."""
    (device or golden()).place_module(module)
    out = pybuda.run_inference(inputs=[inputs]).get(timeout=60)
    return list(out)


class OpModule(pybuda.PyBudaModule):
    def __init__(self, name, fn, params=None):
        super().__init__(name)
        self.fn = fn
        for k, v in (params or {}).items():
            setattr(self, k, Parameter(v, requires_grad=False))

    def forward(self, *xs):
        return self.fn(self, *xs)


class Linear(pybuda.PyBudaModule):
    def __init__(self, name):
        super().__init__(name)
        self.w = Parameter(torch.ones(32, 32), requires_grad=False)

    def forward(self, x):
        return pybuda.op.Matmul("mm", x, self.w)


def r(*shape, lo=0.0, hi=1.0):
    return torch.rand(*shape) * (hi - lo) + lo


torch.manual_seed(0)
A, B, C = r(1, 1, 32, 32), r(1, 1, 32, 32), r(1, 1, 1, 32)
POS = r(1, 1, 32, 32, lo=0.5, hi=2.0)
SIGNED = r(1, 1, 32, 32, lo=-1.0, hi=1.0)
IMG = r(1, 3, 8, 8)
W_CONV = r(4, 3, 3, 3, lo=-0.5, hi=0.5)
IMG4 = r(1, 4, 8, 8)
W_CONVT = r(4, 4, 3, 3, lo=-0.5, hi=0.5)
PERM = torch.stack([torch.randperm(32) for _ in range(32)]).float().reshape(1, 1, 32, 32)
LN_W, LN_B = r(32, lo=0.5, hi=1.5), r(32, lo=-0.5, hi=0.5)

# name -> (forward(self, *inputs), inputs, parameters, torch reference(*inputs, **parameters))
OPS = {
    "pybuda.op.Matmul": (lambda s, a, b, c: pybuda.op.Matmul("mm", a, b, bias=c), (A, B, C), {},
                         lambda a, b, c: a @ b + c),
    "pybuda.op.Add": (lambda s, a, b: pybuda.op.Add("add", a, b), (A, B), {}, lambda a, b: a + b),
    "pybuda.op.Subtract": (lambda s, a, b: pybuda.op.Subtract("sub", a, b), (A, B), {}, lambda a, b: a - b),
    "pybuda.op.Multiply": (lambda s, a, b: pybuda.op.Multiply("mul", a, b), (A, B), {}, lambda a, b: a * b),
    "pybuda.op.Identity": (lambda s, a: pybuda.op.Identity("id", a), (A,), {}, lambda a: a),
    "pybuda.op.Buffer": (lambda s, a: pybuda.op.Buffer("buf", a), (A,), {}, lambda a: a),
    "pybuda.op.ReduceSum": (lambda s, a: pybuda.op.ReduceSum("rs", a, dim=-1), (A,), {},
                            lambda a: a.sum(-1, keepdim=True)),
    "pybuda.op.ReduceAvg": (lambda s, a: pybuda.op.ReduceAvg("ra", a, dim=-2), (A,), {},
                            lambda a: a.mean(-2, keepdim=True)),
    "pybuda.op.Constant": (lambda s, a: pybuda.op.Multiply("mul", a, pybuda.op.Constant("c", constant=3.0)),
                           (A,), {}, lambda a: a * 3.0),
    "pybuda.op.Heaviside": (lambda s, a, b: pybuda.op.Heaviside("hs", a, b), (SIGNED, B), {}, torch.heaviside),
    "pybuda.op.BinaryStack": (lambda s, a, b: pybuda.op.BinaryStack("bs", a, b, dim=-1), (A, B), {},
                              lambda a, b: torch.stack((a, b), dim=-1).flatten(-2)),
    "pybuda.op.HSlice": (lambda s, a: pybuda.op.HSlice("hsl", a, slices=2), (r(1, 1, 32, 64),), {},
                         lambda a: a.reshape(1, 32, 2, 32).permute(0, 2, 1, 3)),
    "pybuda.op.HStack": (lambda s, a: pybuda.op.HStack("hst", a, slices=2), (r(1, 2, 32, 32),), {},
                         lambda a: a.permute(0, 2, 1, 3).reshape(1, 1, 32, 64)),
    "pybuda.op.VSlice": (lambda s, a: pybuda.op.VSlice("vsl", a, slices=2), (r(1, 1, 64, 32),), {},
                         lambda a: a.reshape(1, 2, 32, 32)),
    "pybuda.op.VStack": (lambda s, a: pybuda.op.VStack("vst", a, slices=2), (r(1, 2, 32, 32),), {},
                         lambda a: a.reshape(1, 1, 64, 32)),
    "pybuda.op.Reshape": (lambda s, a: pybuda.op.Reshape("rsh", a, shape=(1, 1, 64, 16)), (A,), {},
                          lambda a: a.reshape(1, 1, 64, 16)),
    "pybuda.op.Index": (lambda s, a: pybuda.op.Index("idx", a, dim=-1, start=0, stop=16, stride=1), (A,), {},
                        lambda a: a[..., 0:16]),
    "pybuda.op.Select": (lambda s, a: pybuda.op.Select("sel", a, dim=-1, index=(0, 16), stride=0), (A,), {},
                         lambda a: a[..., 0:16]),
    "pybuda.op.Pad": (lambda s, a: pybuda.op.Pad("pad", a, pad=(1, 2), mode="constant", channel_last=False), (A,),
                      {}, lambda a: torch.nn.functional.pad(a, (1, 2))),
    "pybuda.op.Concatenate": (lambda s, a, b: pybuda.op.Concatenate("cat", a, b, axis=-1), (A, B), {},
                              lambda a, b: torch.cat((a, b), dim=-1)),
    "pybuda.op.Relu": (lambda s, a: pybuda.op.Relu("relu", a), (SIGNED,), {}, torch.relu),
    "pybuda.op.Gelu": (lambda s, a: pybuda.op.Gelu("gelu", a, approximate="tanh"), (SIGNED,), {},
                       lambda a: torch.nn.functional.gelu(a, approximate="tanh")),
    "pybuda.op.Sigmoid": (lambda s, a: pybuda.op.Sigmoid("sig", a), (SIGNED,), {}, torch.sigmoid),
    "pybuda.op.Max": (lambda s, a, b: pybuda.op.Max("max", a, b), (A, B), {}, torch.maximum),
    "pybuda.op.Exp": (lambda s, a: pybuda.op.Exp("exp", a), (SIGNED,), {}, torch.exp),
    "pybuda.op.Reciprocal": (lambda s, a: pybuda.op.Reciprocal("rec", a), (POS,), {}, torch.reciprocal),
    "pybuda.op.Sqrt": (lambda s, a: pybuda.op.Sqrt("sqrt", a), (POS,), {}, torch.sqrt),
    "pybuda.op.Log": (lambda s, a: pybuda.op.Log("log", a), (POS,), {}, torch.log),
    # rows are permutations of 0..31 (exact in every format, so no ties); the reference does not say whether
    # the reduced dim is kept, so the result is compared without it
    "pybuda.op.Argmax": (lambda s, a: pybuda.op.Argmax("am", a, dim=-1), (PERM,), {},
                         lambda a: a.argmax(-1).float()),
    "pybuda.op.Abs": (lambda s, a: pybuda.op.Abs("abs", a), (SIGNED,), {}, torch.abs),
    "pybuda.op.Clip": (lambda s, a: pybuda.op.Clip("clip", a, min=0.2, max=0.8), (A,), {},
                       lambda a: a.clamp(0.2, 0.8)),
    "pybuda.op.Conv2d": (lambda s, x: pybuda.op.Conv2d("conv", x, s.w, stride=1, padding=1, dilation=1, groups=1),
                         (IMG,), {"w": W_CONV}, lambda x, w: torch.nn.functional.conv2d(x, w, padding=1)),
    "pybuda.op.Conv2dTranspose": (
        lambda s, x: pybuda.op.Conv2dTranspose("convt", x, s.w, stride=1, padding=0, dilation=1, groups=1),
        (IMG4,), {"w": W_CONVT}, lambda x, w: torch.nn.functional.conv_transpose2d(x, w)),
    "pybuda.op.MaxPool2d": (lambda s, x: pybuda.op.MaxPool2d("mp", x, kernel_size=2, stride=2, padding=0), (IMG,),
                            {}, lambda x: torch.nn.functional.max_pool2d(x, 2, 2)),
    "pybuda.op.AvgPool2d": (lambda s, x: pybuda.op.AvgPool2d("ap", x, kernel_size=2, stride=2, padding=0), (IMG,),
                            {}, lambda x: torch.nn.functional.avg_pool2d(x, 2, 2)),
    "pybuda.op.Softmax": (lambda s, a: pybuda.op.Softmax("sm", a, dim=-1, stable=True), (SIGNED,), {},
                          lambda a: torch.softmax(a, -1)),
    "pybuda.op.Layernorm": (
        lambda s, a: pybuda.op.Layernorm("ln", a, s.w, s.b, dim=-1, epsilon=1e-5), (SIGNED,), {"w": LN_W, "b": LN_B},
        lambda a, w, b: torch.nn.functional.layer_norm(a, (32,), w, b, eps=1e-5)),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_op(name):
    fn, inputs, params, ref = OPS[name]
    for p in REFERENCE[name]:
        assert p in inspect.signature(resolve(name)).parameters, f"{name} lacks documented parameter {p}"
    (out,) = run_one(OpModule("m", fn, params), *inputs)
    want = ref(*inputs, **params)
    if name == "pybuda.op.Argmax":
        out = out.value().reshape(want.shape)
    close(out, want)


# --------------------------------------------------------------------------------------------------
# Effects of the runtime, configuration, module and device names
# --------------------------------------------------------------------------------------------------
EFFECTS = {}


def effect(*names):
    def register(f):
        for n in names:
            EFFECTS[n] = f
        return f
    return register


@effect("pybuda.run_inference")
def _run_inference():
    x = r(1, 32, 32)
    q = queue.Queue()
    got = pybuda.run_inference(module=Linear("lin"), inputs=[(x,), (2 * x,)], input_count=2, output_queue=q)
    assert got is q
    close(q.get(timeout=60)[0], x.sum(-1, keepdim=True).expand(1, 32, 32))
    close(q.get(timeout=60)[0], 2 * x.sum(-1, keepdim=True).expand(1, 32, 32))


@effect("pybuda.initialize_pipeline", "pybuda.run_forward")
def _manual_pipeline():
    tt = pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden, module=Linear("lin"))
    x = r(1, 32, 32)
    q = pybuda.initialize_pipeline(training=False, sample_inputs=(x,))
    tt.push_to_inputs(x)
    tt.push_to_inputs(3 * x)
    pybuda.run_forward(input_count=2)
    close(q.get(timeout=60)[0], x.sum(-1, keepdim=True).expand(1, 32, 32))
    close(q.get(timeout=60)[0], 3 * x.sum(-1, keepdim=True).expand(1, 32, 32))


class _Regression(pybuda.PyBudaModule):
    """x @ w for a trainable w, to train in the training effects."""

    def __init__(self, name):
        super().__init__(name)
        self.w = pybuda.Parameter(torch.zeros(32, 32), requires_grad=True)

    def forward(self, x):
        return pybuda.op.Matmul("mm", x, self.w)


def _training_device(steps):
    pybuda.set_configuration_options(default_df_override=pybuda.DataFormat.Float32,
                                     accumulate_df=pybuda.DataFormat.Float32, math_fidelity=pybuda.MathFidelity.HiFi4)
    tt = pybuda.TTDevice("tt0", module=_Regression("reg"), arch=pybuda.BackendDevice.Wormhole_B0,
                         optimizer=pybuda.SGD(learning_rate=0.5), fp32_fallback=pybuda.DataFormat.Float32)
    tt.place_loss_module(pybuda.op.loss.MSELoss("mse"))
    for k in range(steps):
        x = _training_input(k)
        tt.push_to_inputs(x)
        tt.push_to_target_inputs(x)  # learn the identity
    return tt


def _training_input(k):
    return torch.rand(1, 32, 32, generator=torch.Generator().manual_seed(k))


@effect("pybuda.run_training", "pybuda.Device.place_loss_module", "pybuda.Device.push_to_target_inputs")
def _run_training():
    _training_device(8)
    losses = queue.Queue()
    checkpoints = pybuda.run_training(steps=8, loss_queue=losses)
    curve = [float(losses.get(timeout=60)[0].value().sum()) for _ in range(8)]
    assert curve[-1] < 0.5 * curve[0]  # the regression is being learned
    assert float(checkpoints.get(timeout=60)[0]["reg.w"].value().abs().sum()) > 0


@effect("pybuda.run_backward", "pybuda.run_optimizer", "pybuda.get_parameter_gradients",
        "pybuda.TTDevice.get_parameter_gradients", "pybuda.Device.get_first_targets")
def _manual_training_loop():
    tt = _training_device(1)
    assert tt.get_first_targets()[0].shape == (1, 32, 32)
    pybuda.initialize_pipeline(training=True)
    pybuda.run_forward(input_count=1)
    pybuda.run_backward(input_count=1, zero_grad=True)
    grad = pybuda.get_parameter_gradients(tt)[0]["reg.w"].value()
    x = _training_input(0)
    want = -2.0 / (32 * 32) * x[0].T @ x[0]  # d/dw mean((x w - x)^2) at w = 0, about -0.016 per entry
    close(grad, want, atol=1e-4, rtol=1e-2)
    close(tt.get_parameter_gradients()["reg.w"], want, atol=1e-4, rtol=1e-2)
    pybuda.run_optimizer()
    close(pybuda.get_parameter_checkpoint(tt)[0]["reg.w"], -0.5 * want, atol=1e-4, rtol=1e-2)


@effect("pybuda.Device.remove_loss_module")
def _remove_loss_module():
    tt = pybuda.TTDevice("tt0", module=_Regression("reg"))
    tt.place_loss_module(pybuda.op.loss.MSELoss("mse"))
    tt.remove_loss_module()
    with pytest.raises(pybuda.errors.InputError, match="no loss module"):
        tt.push_to_target_inputs(r(1, 32, 32))


@effect("pybuda.Device.push_to_inputs")
def _push_to_inputs():
    tt = pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden, module=Linear("lin"))
    x = r(1, 32, 32)
    pybuda.Device.push_to_inputs(tt, {"x": x})  # by keyword (a dict), as documented
    pybuda.Device.push_to_inputs(tt, {"x": 3 * x})
    q = pybuda.initialize_pipeline(training=False)
    pybuda.run_forward(input_count=2)
    close(q.get(timeout=60)[0], x.sum(-1, keepdim=True).expand(1, 32, 32))
    close(q.get(timeout=60)[0], 3 * x.sum(-1, keepdim=True).expand(1, 32, 32))


@effect("pybuda.shutdown")
def _shutdown():
    pybuda.run_inference(module=Linear("lin"), inputs=[(r(1, 32, 32),)]).get(timeout=60)
    pybuda.shutdown()
    with pytest.raises(Exception, match="no pipeline"):
        pybuda.run_forward(input_count=1)


@effect("pybuda.get_parameter_checkpoint", "pybuda.update_device_parameters")
def _parameters():
    tt = pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden, module=Linear("lin"))
    x = r(1, 32, 32)
    q = pybuda.initialize_pipeline(training=False, sample_inputs=(x,))
    (ckpt,) = pybuda.get_parameter_checkpoint(device=tt)
    assert list(ckpt) == ["lin.w"]
    close(ckpt["lin.w"], torch.ones(32, 32))
    pybuda.update_device_parameters(device=tt, parameters=[{"lin.w": 2 * torch.ones(32, 32)}])
    close(pybuda.get_parameter_checkpoint()[0]["lin.w"], 2 * torch.ones(32, 32))
    tt.push_to_inputs(x)
    pybuda.run_forward(input_count=1)
    close(q.get(timeout=60)[0], 2 * x.sum(-1, keepdim=True).expand(1, 32, 32))


@effect("pybuda.set_configuration_options")
def _set_configuration_options():
    from pybuda.config import _get_global_compiler_config

    values = dict(
        enable_recompute=False, balancer_policy="Ribbon", place_on_one_row=True, enable_t_streaming=True,
        manual_t_streaming=False, enable_consteval=False, default_df_override=pybuda.DataFormat.Float16_b,
        accumulate_df=pybuda.DataFormat.Float32, math_fidelity=pybuda.MathFidelity.HiFi4,
        performance_trace=None, backend_opt_level=2, backend_output_dir=None,
        backend_device_descriptor_path=None, backend_cluster_descriptor_path=None,
        backend_runtime_params_path=None, backend_runtime_args=None, enable_auto_fusing=False,
        enable_conv_prestride=True, enable_stable_softmax=True, amp_level=0, harvested_rows=None,
        store_backend_db_to_yaml=False, input_queues_on_host=True, output_queues_on_host=True,
        enable_auto_transposing_placement=False, use_interactive_placer=True, op_intermediates_to_save=None,
        enable_enumerate_u_kt=True, enable_device_tilize=False, dram_placement_algorithm=None,
        chip_placement_policy=None, enable_forked_dram_inputs=False, device_config=None)
    assert set(values) == set(REFERENCE["pybuda.set_configuration_options"])
    pybuda.set_configuration_options(**values)
    cfg = _get_global_compiler_config()
    assert cfg.balancer_policy == "Ribbon"
    assert cfg.enable_consteval is False
    assert cfg.default_df_override == pybuda.DataFormat.Float16_b
    assert cfg.default_math_fidelity == pybuda.MathFidelity.HiFi4
    assert cfg.backend_opt_level == 2
    # the options reach a compile: a 2-input add still runs correctly under them
    (out,) = run_one(OpModule("m", lambda s, a, b: pybuda.op.Add("add", a, b)), A, B)
    close(out, A + B)


def _relu_exp_placement(device=None):
    """Compile relu -> exp on a golden TTDevice and return the placer solution (fusing off, so that
    both ops stay visible to the placer)."""
    pybuda.set_configuration_options(enable_auto_fusing=False)
    tt = device or golden()
    tt.place_module(OpModule("m", lambda s, a: pybuda.op.Exp("exp", pybuda.op.Relu("relu", a))))
    x = r(1, 1, 64, 64, lo=-1.0)
    out = pybuda.run_inference(inputs=[(x,)]).get(timeout=60)
    close(out[0], torch.exp(torch.relu(x)))
    return tt.get_compiled_results()[0].placer_solution


@effect("pybuda.set_epoch_break")
def _set_epoch_break():
    pybuda.set_epoch_break(op_names="exp")
    placements = _relu_exp_placement().op_placements
    assert placements["exp"].global_epoch > placements["relu"].global_epoch


@effect("pybuda.set_chip_break")
def _set_chip_break():
    pybuda.set_chip_break(op_names=["exp"])
    tt = pybuda.TTDevice("tt0", num_chips=2, devtype=pybuda.BackendType.Golden,
                         arch=pybuda.BackendDevice.Wormhole_B0)
    placements = _relu_exp_placement(tt).op_placements
    assert placements["exp"].chip_id != placements["relu"].chip_id


@effect("pybuda.override_op_size")
def _override_op_size():
    pybuda.override_op_size(op_name="relu", grid_size=(1, 2))
    assert _relu_exp_placement().op_placements["relu"].grid_size == (1, 2)


@effect("pybuda.detect_available_devices")
def _detect_available_devices():
    devs = pybuda.detect_available_devices()
    assert isinstance(devs, list)
    assert all(isinstance(d, pybuda.BackendDevice) for d in devs)


@effect("pybuda.Module", "pybuda.Module.get_name")
def _module():
    m = pybuda.Module("my_module")
    assert pybuda.Module.get_name(m) == "my_module"


@effect("pybuda.Module.get_device", "pybuda.TTDevice.place_module", "pybuda.Device.place_module")
def _placement():
    m1, m2 = Linear("a"), Linear("b")
    tt = golden()
    assert pybuda.Module.get_device(m1) is None
    pybuda.TTDevice.place_module(tt, m1)
    pybuda.Device.place_module(tt, [m2])
    assert m1.get_device() is tt and m2.get_device() is tt
    assert list(tt.modules) == [m1, m2]


@effect("pybuda.Module.run")
def _module_run():
    x = r(1, 32, 32)
    (out,) = pybuda.Module.run(Linear("lin"), x)
    close(out, x.sum(-1, keepdim=True).expand(1, 32, 32))


@effect("pybuda.PyTorchModule", "pybuda.CPUDevice", "pybuda.CPUDevice.place_module")
def _pytorch_module_on_cpu():
    lin = torch.nn.Linear(8, 4)
    cpu = pybuda.CPUDevice("cpu0", module=None, input_dtypes=[torch.float32])
    mod = pybuda.PyTorchModule("pt", lin, redirect_forward=True)
    pybuda.CPUDevice.place_module(cpu, mod)
    x = r(1, 8)
    out = pybuda.run_inference(inputs=[(x,)]).get(timeout=60)
    close(out[0], lin(x).detach(), atol=1e-5)


@effect("pybuda.PyTorchModule.forward")
def _pytorch_forward():
    lin = torch.nn.Linear(8, 4)
    x = r(2, 8)
    out = pybuda.PyTorchModule("pt", lin).forward(x)
    assert isinstance(out, tuple)
    close(out[0], lin(x).detach(), atol=1e-6)


@effect("pybuda.PyTorchModule.add_parameter", "pybuda.PyTorchModule.get_parameters",
        "pybuda.PyTorchModule.set_parameters")
def _pytorch_parameters():
    mod = pybuda.PyTorchModule("pt", torch.nn.Linear(2, 2, bias=False))
    mod.add_parameter(name="extra", parameter=Parameter(torch.ones(3), requires_grad=False))
    params = {p.get_name(): p for p in mod.get_parameters()}
    assert set(params) == {"weight", "extra"}
    close(params["extra"].value(), torch.ones(3))
    mod.set_parameters(weight=torch.eye(2))
    close(mod.forward(torch.tensor([[2.0, 3.0]]))[0], torch.tensor([[2.0, 3.0]]), atol=1e-6)


@effect("pybuda.PyBudaModule", "pybuda.PyBudaModule.pre_forward")
def _pybuda_module_pre_forward():
    calls = []

    class M(pybuda.PyBudaModule):
        def pre_forward(self, *args, **kwargs):
            calls.append(len(args))

        def forward(self, x):
            return pybuda.op.Exp("exp", x)

    m = M("m")
    assert m.get_name() == "m"
    (out,) = run_one(m, SIGNED)
    close(out, torch.exp(SIGNED))
    assert calls and calls[0] == 1


@effect("pybuda.PyBudaModule.add_parameter", "pybuda.PyBudaModule.get_parameter",
        "pybuda.PyBudaModule.set_parameter", "pybuda.PyBudaModule.get_parameters",
        "pybuda.PyBudaModule.load_parameter_dict")
def _pybuda_parameters():
    class M(pybuda.PyBudaModule):
        def forward(self, x):
            return pybuda.op.Matmul("mm", x, self.get_parameter("m.w"))

    m = M("m")
    m.add_parameter(name="w", parameter=Parameter(32, 32, requires_grad=False), prepend_name=True)
    assert [p.get_name() for p in m.get_parameters(submodules=True)] == ["m.w"]
    m.set_parameter(name="m.w", data=torch.eye(32))
    close(m.get_parameter("m.w").value(), torch.eye(32))
    m.load_parameter_dict(data={"m.w": 2 * torch.eye(32)})
    x = r(1, 32, 32)
    (out,) = run_one(m, x)
    close(out, 2 * x)


@effect("pybuda.PyBudaModule.add_constant", "pybuda.PyBudaModule.set_constant",
        "pybuda.PyBudaModule.get_constant")
def _pybuda_constants():
    class M(pybuda.PyBudaModule):
        def forward(self, x):
            return pybuda.op.Add("add", x, self.get_constant("c"))

    m = M("m")
    m.add_constant(name="c", prepend_name=False, shape=(1, 32))
    m.set_constant(name="c", data=torch.full((1, 32), 0.5))
    close(m.get_constant("c").value(), torch.full((1, 32), 0.5))
    x = r(1, 32, 32)
    (out,) = run_one(m, x)
    close(out, x + 0.5)


@effect("pybuda.PyBudaModule.insert_tapout_queue_for_op")
def _insert_tapout_queue():
    class M(pybuda.PyBudaModule):
        def forward(self, x):
            return pybuda.op.Exp("exp", pybuda.op.Relu("relu", x))

    m = M("m")
    handle = pybuda.PyBudaModule.insert_tapout_queue_for_op(m, op_name="relu", output_index=0)
    (out,) = run_one(m, SIGNED)
    close(out, torch.exp(torch.relu(SIGNED)))
    saved = pybuda.get_intermediates_queue().get_nowait()  # the tapped op's output, saved on this inference
    close(saved[handle], torch.relu(SIGNED))


@effect("pybuda.Device")
def _device():
    d = pybuda.Device("dev", mp_context=None)
    assert d.name == "dev" and list(d.modules) == []


@effect("pybuda.Device.push_to_command_queue", "pybuda.Device.get_command_queue_response")
def _command_queue():
    from pybuda.runtime.commands import Command

    tt = pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden, module=Linear("lin"))
    pybuda.initialize_pipeline(training=False, sample_inputs=(r(1, 32, 32),))
    pybuda.Device.push_to_command_queue(tt, Command.sync())
    assert pybuda.Device.get_command_queue_response(tt) is True


@effect("pybuda.Device.get_next_command", "pybuda.Device.run_next_command")
def _next_command():
    from pybuda.runtime.commands import Command, CommandType

    tt = golden()
    q = queue.Queue()
    q.put(Command.sync())
    cmd = pybuda.Device.get_next_command(tt, command_queue=q)
    assert cmd.command_type == CommandType.SYNC and q.empty()
    assert pybuda.Device.run_next_command(tt, cmd) is True


@effect("pybuda.Device.dc_transfer")
def _dc_transfer():
    tt = pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden, module=Linear("lin"))
    pybuda.initialize_pipeline(training=False, sample_inputs=(r(1, 32, 32),))
    pybuda.Device.dc_transfer(tt, direction="forward")
    with pytest.raises(Exception, match="direction"):
        pybuda.Device.dc_transfer(tt, direction="sideways")


@effect("pybuda.Device.get_first_inputs")
def _get_first_inputs():
    tt = pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden, module=Linear("lin"))
    assert pybuda.Device.get_first_inputs(tt) is None
    x = r(1, 32, 32)
    tt.push_to_inputs(x)
    mb, first = pybuda.Device.get_first_inputs(tt, peek=True)
    assert mb == 1
    close(first[0], x, atol=0)


@effect("pybuda.Device.shutdown_device", "pybuda.TTDevice.shutdown_device")
def _shutdown_device():
    tt = pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden, module=Linear("lin"))
    x = r(1, 32, 32)
    pybuda.initialize_pipeline(training=False, sample_inputs=(x,))
    pybuda.shutdown()
    pybuda.Device.shutdown_device(tt)  # base: nothing held
    pybuda.TTDevice.shutdown_device(tt)  # releases the compiled executors; a second call is harmless
    pybuda.TTDevice.shutdown_device(tt)


@effect("pybuda.CPUDevice.compile_for")
def _cpu_compile_for():
    cpu = pybuda.CPUDevice("cpu0", module=pybuda.PyTorchModule("pt", torch.nn.Linear(4, 3)))
    outs = cpu.compile_for(inputs=(Tensor.create_from_torch(r(1, 4)),), compiler_cfg=pybuda.CompilerConfig(),
                           targets=[], microbatch_size=1, microbatch_count=1, verify_cfg=None)
    assert [tuple(o.shape.get_pytorch_shape()) if hasattr(o.shape, "get_pytorch_shape") else tuple(o.shape)
            for o in outs] == [(1, 3)]


@effect("pybuda.CPUDevice.sync", "pybuda.TTDevice.sync")
def _sync():
    relu = torch.nn.ReLU()
    cpu = pybuda.CPUDevice("cpu0", module=pybuda.PyTorchModule("pt", relu))
    tt = pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden, module=Linear("lin"))
    x = r(1, 32, 32, lo=-1.0)
    q = pybuda.initialize_pipeline(training=False, sample_inputs=(x,))
    cpu.push_to_inputs(x)
    pybuda.run_forward(input_count=1)
    pybuda.CPUDevice.sync(cpu)
    pybuda.TTDevice.sync(tt)
    # once both devices are idle the output has reached the queue
    close(q.get_nowait()[0], torch.relu(x).sum(-1, keepdim=True).expand(1, 32, 32))


@effect("pybuda.TTDevice")
def _ttdevice():
    tt = pybuda.TTDevice("tt0", num_chips=1, chip_ids=[0], arch=pybuda.BackendDevice.Grayskull,
                         devtype=pybuda.BackendType.Golden, device_mode=None, optimizer=None, scheduler=None,
                         fp32_fallback=pybuda.DataFormat.Float16_b, mp_context=None, module=Linear("lin"))
    assert tt.name == "tt0" and tt.arch == pybuda.BackendDevice.Grayskull
    assert [m.get_name() for m in tt.modules] == ["lin"]
    x = r(1, 32, 32)
    out = pybuda.run_inference(inputs=[(x,)]).get(timeout=60)
    close(out[0], x.sum(-1, keepdim=True).expand(1, 32, 32))


@effect("pybuda.TTDevice.get_device_config")
def _get_device_config():
    tt = pybuda.TTDevice("tt0", arch=pybuda.BackendDevice.Grayskull, devtype=pybuda.BackendType.Golden)
    desc = tt.get_device_config(compiler_cfg=pybuda.CompilerConfig())
    assert desc.arch == pybuda.BackendDevice.Grayskull


@effect("pybuda.TTDevice.remove_modules")
def _remove_modules():
    m = Linear("lin")
    tt = pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden, module=m)
    tt.remove_modules()
    assert list(tt.modules) == [] and m.get_device() is None


@effect("pybuda.TTDevice.set_active_subgraph", "pybuda.TTDevice.get_active_subgraph")
def _active_subgraph():
    tt = pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden, module=[Linear("a"), Linear("b")])
    assert tt.get_active_subgraph() is None
    tt.set_active_subgraph(subgraph_index=1)
    assert tt.get_active_subgraph() == 1
    with pytest.raises(Exception):
        tt.set_active_subgraph(subgraph_index=5)


@effect("pybuda.TTDevice.generate_graph")
def _generate_graph():
    tt = pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden, module=Linear("lin"))
    x = r(1, 32, 32)
    graph, outputs, intermediates, inputs, target = tt.generate_graph(
        Tensor.create_from_torch(x), target_tensors=[], return_intermediate=False, graph_name="g",
        compiler_cfg=None, trace_only=False, verify_cfg=None)
    assert graph is not None and target is None
    close(outputs[0], x.sum(-1, keepdim=True).expand(1, 32, 32))


@effect("pybuda.TTDevice.compile_for")
def _tt_compile_for():
    tt = pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden, module=Linear("lin"))
    outs = tt.compile_for(inputs=(Tensor.create_from_torch(r(1, 32, 32)),), compiler_cfg=pybuda.CompilerConfig(),
                          targets=[], microbatch_size=1, microbatch_count=1, verify_cfg=None)
    assert len(outs) == 1 and list(outs[0].shape.get_pytorch_shape() if hasattr(outs[0].shape, "get_pytorch_shape")
                                   else outs[0].shape) == [1, 32, 32]


@effect("pybuda.TTDevice.get_parameter_checkpoint", "pybuda.TTDevice.get_all_parameters",
        "pybuda.TTDevice.get_parameters")
def _tt_parameters():
    tt = pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden, module=Linear("lin"))
    pybuda.initialize_pipeline(training=False, sample_inputs=(r(1, 32, 32),))
    pybuda.update_device_parameters(device=tt, parameters=[{"lin.w": 3 * torch.ones(32, 32)}])
    close(tt.get_parameter_checkpoint()["lin.w"], 3 * torch.ones(32, 32))
    close(tt.get_all_parameters()["lin.w"], 3 * torch.ones(32, 32))
    assert [p.get_name() for p in tt.get_parameters(ignore_unused_parameters=True)] == ["lin.w"]


@effect("pybuda.TTDevice.get_dram_io_queues")
def _dram_io_queues():
    tt = pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden, module=Linear("lin"))
    pybuda.initialize_pipeline(training=False, sample_inputs=(r(1, 32, 32),))
    ins = tt.get_dram_io_queues(queue_type="input")
    outs = tt.get_dram_io_queues(queue_type="output")
    assert len(ins) == 1 and len(outs) == 1
    with pytest.raises(Exception):
        tt.get_dram_io_queues(queue_type="nonsense")


@effect("pybuda.Device.forward", "pybuda.TTDevice.forward")
def _device_forward():
    tt = pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden, module=Linear("lin"))
    x = r(1, 32, 32)
    q = pybuda.initialize_pipeline(training=False, sample_inputs=(x,))
    tt.push_to_inputs(x)
    tt.push_to_inputs(2 * x)
    pybuda.TTDevice.forward(tt, loop_count=2)  # the device's own loop: two micro-batches
    close(q.get(timeout=60)[0], x.sum(-1, keepdim=True).expand(1, 32, 32))
    close(q.get(timeout=60)[0], 2 * x.sum(-1, keepdim=True).expand(1, 32, 32))
    with pytest.raises(pybuda.errors.InputError, match="queued"):
        pybuda.Device.forward(tt, loop_count=1)  # nothing left to run


@effect("pybuda.CPUDevice.forward", "pybuda.CPUDevice.forward_pt")
def _cpu_forward():
    relu = torch.nn.ReLU()
    cpu = pybuda.CPUDevice("cpu0", module=pybuda.PyTorchModule("pt", relu))
    tt = pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden, module=Linear("lin"))
    x = r(1, 32, 32, lo=-1.0)
    q = pybuda.initialize_pipeline(training=False, sample_inputs=(x,))
    cpu.push_to_inputs(x)
    cpu.push_to_inputs(-x)
    cpu.forward_pt(loop_count=1)  # device by device, in pipeline order, as TT-Buda's loops
    tt.forward(loop_count=1)
    cpu.forward(loop_count=1)
    tt.forward(loop_count=1)
    close(q.get(timeout=60)[0], torch.relu(x).sum(-1, keepdim=True).expand(1, 32, 32))
    close(q.get(timeout=60)[0], torch.relu(-x).sum(-1, keepdim=True).expand(1, 32, 32))
    pybuda.shutdown()
    pybuda.pybuda_reset()
    pybuda.CPUDevice("cpu1", module=OpModule("m", lambda s, a: pybuda.op.Exp("exp", a)))
    with pytest.raises(pybuda.errors.ModuleError, match="PyTorch"):
        pybuda.CPUDevice.forward_pt(pybuda.runtime.state.user_devices()[0], loop_count=1)


@effect("pybuda.Device.generate", "pybuda.CPUDevice.generate")
def _generate():
    cpu = pybuda.CPUDevice("cpu0", module=pybuda.PyTorchModule("pt", torch.nn.Tanh()))
    x = r(2, 8, lo=-1.0)
    q = pybuda.initialize_pipeline(training=False, sample_inputs=(x,))
    cpu.push_to_inputs(x)
    pybuda.CPUDevice.generate(cpu, loop_count=1, write_index=0)
    close(q.get(timeout=60)[0], torch.tanh(x), atol=1e-6)
    cpu.push_to_inputs(x)
    with pytest.raises(pybuda.errors.InputError, match="write_index"):
        pybuda.Device.generate(cpu, loop_count=1, write_index=-1)
    pybuda.Device.generate(cpu, loop_count=1, write_index=3)
    close(q.get(timeout=60)[0], torch.tanh(x), atol=1e-6)


@effect("pybuda.TTDevice.generate")
def _tt_generate():
    tt = pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden, module=Linear("lin"))
    x = r(1, 32, 32)
    q = pybuda.initialize_pipeline(training=False, sample_inputs=(x,))
    tt.push_to_inputs(x)
    with pytest.raises(pybuda.errors.InputError, match="tokens_per_iter"):
        tt.generate(loop_count=1, write_index=-1, tokens_per_iter=0, token_id=0)
    with pytest.raises(pybuda.errors.InputError, match="not both"):
        tt.generate(loop_count=1, write_index=2, tokens_per_iter=32, token_id=0)
    tt.generate(loop_count=1, write_index=-1, tokens_per_iter=32, token_id=0)
    close(q.get(timeout=60)[0], x.sum(-1, keepdim=True).expand(1, 32, 32))


@effect("pybuda.Device.run")
def _device_run():
    import tempfile

    from pybuda.runtime.commands import Command, CommandType
    from pybuda.runtime.device import InputItem

    tt = pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden, module=Linear("lin"))
    x = r(1, 32, 32)
    tt.command_queue.put(Command(CommandType.COMPILE, {"sample": InputItem((x,)), "want_outputs": True}))
    tt.command_queue.put(Command.sync())
    tt.command_queue.put(Command.quit())
    with tempfile.TemporaryDirectory() as tmp:
        out_dir = os.path.join(tmp, "perf")
        assert pybuda.Device.run(tt, output_dir=out_dir) is True  # ran until QUIT
        assert os.path.isdir(out_dir)
    sample_out = tt.command_queue_resp.get_nowait()  # COMPILE answers with the next device's sample
    close(sample_out.tensors[0], x.sum(-1, keepdim=True).expand(1, 32, 32))
    assert tt.command_queue_resp.get_nowait() is True and tt.command_queue.empty()


@effect("pybuda.Device.dc_transfer_thread")
def _dc_transfer_thread():
    import threading

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYBUDA_FORCE_THREADS", "1")
        mp.setenv("PYBUDA_FORCE_CONCURRENT", "1")
        tt = pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden, module=Linear("lin"))
        x = r(1, 32, 32)
        q = pybuda.initialize_pipeline(training=False, sample_inputs=(x,))
        assert pybuda.runtime.context.current().mode == "threads"
        requests = queue.Queue()
        done = []
        thread = threading.Thread(target=lambda: done.append(pybuda.Device.dc_transfer_thread(
            tt, direction="forward", direction_queue=requests)))
        thread.start()
        tt.push_to_inputs(x)
        pybuda.run_forward(input_count=1)
        requests.put(True)
        requests.put(None)  # ends the thread
        thread.join(60)
        assert done == [1]
        # the transfer completed: the output is in the queue without waiting
        close(q.get_nowait()[0], x.sum(-1, keepdim=True).expand(1, 32, 32))
        with pytest.raises(pybuda.errors.InputError, match="direction"):
            tt.dc_transfer_thread("sideways", requests)
        pybuda.shutdown()


@effect("pybuda.Device.compile_for")
def _device_compile_for():
    tt = pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden, module=Linear("lin"))
    pybuda.Device.compile_for(tt, training=False, microbatch_size=4, microbatch_count=3)
    assert (tt.training, tt.microbatch_count) == (False, 3)
    with pytest.raises(pybuda.errors.InputError, match="microbatch_count"):
        pybuda.Device.compile_for(tt, training=False, microbatch_size=4, microbatch_count=0)
    # the devices' compile_for(inputs, ...) records the same through it
    tt.compile_for((r(2, 32, 32),), microbatch_count=2)
    assert tt.microbatch_count == 2 and tt.get_compiled_results()[0].microbatch == 2
    pybuda.initialize_pipeline(training=False, sample_inputs=(r(2, 32, 32),), microbatch_count=5)  # and pipelines
    assert tt.microbatch_count == 5


@effect("pybuda.CPUDevice.compile_for_pt")
def _cpu_compile_for_pt():
    cpu = pybuda.CPUDevice("cpu0", module=pybuda.PyTorchModule("pt", torch.nn.Linear(4, 3)))
    outs = cpu.compile_for_pt(inputs=(Tensor.create_from_torch(r(2, 4)),), compiler_cfg=pybuda.CompilerConfig(),
                              targets=[], microbatch_size=2, microbatch_count=1, verify_cfg=None)
    assert [tuple(o.shape.dims) for o in outs] == [(2, 3)]
    other = pybuda.CPUDevice("cpu1", module=OpModule("m", lambda s, a: pybuda.op.Exp("exp", a)))
    with pytest.raises(pybuda.errors.ModuleError, match="not PyTorchModules"):
        other.compile_for_pt(inputs=(r(1, 4),), compiler_cfg=None)


@effect("pybuda.CPUDevice.cpueval_forward", "pybuda.CPUDevice.cpueval_forward_pt")
def _cpu_cpueval_forward():
    lin = torch.nn.Linear(4, 3)
    cpu = pybuda.CPUDevice("cpu0", module=pybuda.PyTorchModule("pt", lin))
    x = r(2, 4)
    w = torch.full((3, 4), 0.5)
    (out,) = cpu.cpueval_forward_pt(inputs=[x], parameters={"weight": w}, save_for_backward=True, targets=[])
    close(out, x @ w.T + lin.bias.detach(), atol=1e-6)
    assert torch.equal(lin.weight.detach(), lin.weight.detach())  # the module's own weight is untouched
    assert not torch.allclose(lin.weight.detach(), w)
    inputs, outputs = cpu.saved_for_backward
    assert torch.equal(inputs[0], x) and torch.equal(outputs[0], out)
    (out,) = pybuda.CPUDevice.cpueval_forward(cpu, inputs=[x], parameters={}, save_for_backward=False)
    close(out, lin(x).detach(), atol=1e-6)
    with pytest.raises(pybuda.errors.InputError, match="unknown parameter"):
        cpu.cpueval_forward(inputs=[x], parameters={"nope": w}, save_for_backward=False)


@effect("pybuda.TTDevice.cpueval_forward")
def _tt_cpueval_forward():
    tt = pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden, module=Linear("lin"))
    x = r(1, 32, 32)
    (out,) = tt.cpueval_forward(inputs=[x], parameters={"lin.w": 2 * torch.ones(32, 32)}, save_for_backward=False,
                                targets=[])
    close(out, 2 * x.sum(-1, keepdim=True).expand(1, 32, 32), atol=1e-4)
    tt.place_loss_module(pybuda.op.loss.MSELoss("mse"))
    (loss,) = tt.cpueval_forward(inputs=[x], parameters={}, save_for_backward=False, targets=[torch.zeros(1, 32, 32)])
    want = (x.sum(-1, keepdim=True).expand(1, 32, 32) ** 2).mean()
    close(loss.reshape(()), want, atol=1e-3, rtol=1e-3)


@effect("pybuda.CPUDevice.cpueval_backward")
def _cpu_cpueval_backward():
    lin = torch.nn.Linear(4, 3)
    cpu = pybuda.CPUDevice("cpu0", module=pybuda.PyTorchModule("pt", lin))
    x = r(2, 4)
    with pytest.raises(pybuda.errors.PybudaError, match="save_for_backward"):
        cpu.cpueval_backward(bw_inputs=[torch.ones(2, 3)], parameters={})
    cpu.cpueval_forward(inputs=[x], parameters={}, save_for_backward=True)
    g = r(2, 3)
    (dx,), grads = pybuda.CPUDevice.cpueval_backward(cpu, bw_inputs=[g], parameters={})
    close(dx, g @ lin.weight.detach(), atol=1e-5)
    close(grads["weight"], g.T @ x, atol=1e-5)
    close(grads["bias"], g.sum(0), atol=1e-5)


@effect("pybuda.Device.cpueval_backward")
def _device_cpueval_backward():
    tt = pybuda.TTDevice("tt0", devtype=pybuda.BackendType.Golden, module=Linear("lin"))
    x, w = r(1, 32, 32), r(32, 32)
    (out,) = tt.cpueval_forward(inputs=[x], parameters={"lin.w": w}, save_for_backward=True)
    close(out, x @ w, atol=1e-4)
    g = r(1, 32, 32)
    (dx,), grads = pybuda.Device.cpueval_backward(tt, bw_inputs=[g], parameters={"lin.w": w})
    close(dx, g @ w.T, atol=1e-4)
    close(grads["lin.w"], x[0].T @ g[0], atol=1e-4)


@effect("pybuda.CPUDevice.pop_parameter_checkpoint")
def _pop_parameter_checkpoint():
    lin = torch.nn.Linear(4, 3)
    cpu = pybuda.CPUDevice("cpu0", module=pybuda.PyTorchModule("pt", lin))
    pybuda.initialize_pipeline(training=False, sample_inputs=(r(1, 4),))
    ckpt = cpu.pop_parameter_checkpoint()
    assert set(ckpt) == {"weight", "bias"}
    close(ckpt["weight"], lin.weight.detach(), atol=0)
    pybuda.update_device_parameters(device=cpu, parameters=[{"bias": torch.ones(3)}])
    close(cpu.pop_parameter_checkpoint()["bias"], torch.ones(3), atol=0)


DATA_FORMATS = [n.rsplit(".", 1)[1] for n in REFERENCE if n.startswith("pybuda.DataFormat.")
                and n.rsplit(".", 1)[1] not in ("from_json", "to_json", "name")]
FIDELITIES = [n.rsplit(".", 1)[1] for n in REFERENCE if n.startswith("pybuda.MathFidelity.")]


@effect("pybuda.DataFormat", *[f"pybuda.DataFormat.{m}" for m in DATA_FORMATS], "pybuda.DataFormat.name",
        "pybuda.DataFormat.to_json", "pybuda.DataFormat.from_json")
def _data_format():
    members = [getattr(pybuda.DataFormat, m) for m in DATA_FORMATS]
    assert len(set(members)) == len(members)
    for m, name in zip(members, DATA_FORMATS):
        assert m.name == name
        assert pybuda.DataFormat.from_json(m.to_json()) == m
    # the format reaches tensors: bfloat16 data is Float16_b
    assert Tensor.create_from_torch(torch.zeros(2, dtype=torch.bfloat16)).data_format == pybuda.DataFormat.Float16_b


@effect("pybuda.MathFidelity", *[f"pybuda.MathFidelity.{m}" for m in FIDELITIES])
def _math_fidelity():
    members = [getattr(pybuda.MathFidelity, m) for m in FIDELITIES]
    assert len(set(members)) == len(members)
    assert [m.name for m in members] == FIDELITIES


@pytest.mark.parametrize("name", sorted(EFFECTS))
def test_effect(name):
    # an enum's ``name`` is a property of its members (not readable on the class itself)
    obj = pybuda.DataFormat.Float32.name if name == "pybuda.DataFormat.name" else resolve(name)
    documented = REFERENCE[name]
    if documented and callable(obj) and not isinstance(obj, type(pybuda.DataFormat.Float32)):
        params = inspect.signature(obj).parameters
        var_kw = any(p.kind == p.VAR_KEYWORD for p in params.values())
        lacking = [p for p in documented if p not in params and not var_kw]
        assert not lacking, f"{name} lacks documented parameter(s) {lacking}"
    EFFECTS[name]()


# --------------------------------------------------------------------------------------------------
# Known-broken and out-of-scope names
# --------------------------------------------------------------------------------------------------
def _exists(name):
    try:
        resolve(name)
        return True
    except AttributeError:
        return False


@pytest.mark.parametrize("name", sorted(MISSING))
def test_missing_is_still_broken(name):
    reason = MISSING[name]
    if reason.startswith("missing:"):
        assert not _exists(name), f"{name} now exists: write its effect test and drop it from MISSING"
    else:  # pragma: no cover - every MISSING entry needs a check here
        pytest.fail(f"no still-broken check for {name}")


@pytest.mark.parametrize("name", sorted(OUT_OF_SCOPE))
def test_out_of_scope_exists(name):
    if name in OUT_OF_SCOPE_ABSENT:
        assert not _exists(name), f"{name} now exists: drop it from OUT_OF_SCOPE_ABSENT"
        return
    assert _exists(name)
    if name == "pybuda.run_training":
        with pytest.raises(Exception):
            pybuda.run_training(epochs=1, steps=1)
