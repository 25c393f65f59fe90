"""The model zoo: every model/variant builds, runs, has the right output shape, and is reproducible."""

import collections

import pytest
import torch

pytest.importorskip("transformers")

from pybuda.errors import ConfigError, InputError  # noqa: E402
from pybuda.models import ModelSpec, get_model, list_models, model_entry  # noqa: E402

# (name, variant, task, microbatch) -> expected output shape. Tiny variants run with microbatch 2 to prove
# the batch dimension is threaded through.
FAST_CASES = {
    ("bert", "tiny", "encoder", 2): (2, 128, 128),
    ("bert", "tiny", "text_classification", 2): (2, 2),
    ("gpt2", "tiny", "causal_lm", 2): (2, 128, 1024),
    ("vit", "tiny", "image_classification", 2): (2, 10),
    ("resnet", "tiny", "image_classification", 2): (2, 10),
    ("mobilenet_v1", "tiny", "image_classification", 2): (2, 10),
    ("mobilenet_v2", "tiny", "image_classification", 2): (2, 10),
    ("whisper", "mini", "audio_encoder", 2): (2, 100, 128),
    # Full-size models that build and run in well under 5 s each: the TT-Buda seed example (BERT-base
    # encoder on [1, 128, 768] hidden states) and the ImageNet CNNs / Whisper-tiny of the benchmarks.
    ("bert", "base", "encoder", 1): (1, 128, 768),
    ("resnet", "resnet50", "image_classification", 1): (1, 1000),
    ("resnet", "resnet50_v1", "image_classification", 1): (1, 1000),
    ("mobilenet_v1", "base", "image_classification", 1): (1, 1001),
    ("mobilenet_v2", "base", "image_classification", 1): (1, 1001),
    ("whisper", "tiny", "audio_encoder", 1): (1, 1500, 384),
    # The CNNs of TT-Buda's published table (issue #16), written from their papers.
    ("vovnet_v2", "tiny", "image_classification", 2): (2, 10),
    ("inception_v4", "tiny", "image_classification", 2): (2, 10),
    ("hrnet", "tiny", "image_classification", 2): (2, 10),
    ("unet", "tiny", "segmentation", 2): (2, 1, 64, 64),
    # Small-config Hugging Face architectures (issue #12): decoders, windowed/hybrid vision, speech.
    ("llama", "mini", "causal_lm", 2): (2, 32, 512),
    ("opt", "mini", "causal_lm", 2): (2, 32, 512),
    ("gpt_neox", "mini", "causal_lm", 2): (2, 32, 512),
    ("swin", "mini", "image_classification", 2): (2, 10),
    ("mobilevit", "mini", "image_classification", 2): (2, 10),
    ("convnext", "mini", "image_classification", 2): (2, 10),
    ("wav2vec2", "mini", "ctc", 2): (2, 79, 32),
}

SLOW_CASES = {
    ("bert", "base", "text_classification", 1): (1, 2),
    ("bert", "large", "encoder", 1): (1, 384, 1024),
    ("bert", "large", "text_classification", 1): (1, 2),
    ("gpt2", "small", "causal_lm", 1): (1, 128, 50257),
    ("vit", "base", "image_classification", 1): (1, 1000),
    ("whisper", "base", "audio_encoder", 1): (1, 1500, 512),
    ("vovnet_v2", "39", "image_classification", 1): (1, 1000),
    ("inception_v4", "base", "image_classification", 1): (1, 1000),
    ("hrnet", "w64", "image_classification", 1): (1, 1000),
    ("unet", "base", "segmentation", 1): (1, 1, 256, 256),
}

#: Published parameter counts of the full-size CNNs (millions): Inception-v4 42.7 (Szegedy et al. 2016),
#: HRNetV2-W64 128.1 (Wang et al. 2020), the brain-MRI U-Net with 32 initial features 7.76.
PUBLISHED_PARAMS_M = {("inception_v4", "base"): 42.7, ("hrnet", "w64"): 128.1, ("unet", "base"): 7.76}

TINY = [("bert", "tiny", "encoder"), ("bert", "tiny", "text_classification"), ("gpt2", "tiny", None),
        ("vit", "tiny", None), ("resnet", "tiny", None), ("mobilenet_v1", "tiny", None),
        ("mobilenet_v2", "tiny", None), ("whisper", "mini", None), ("vovnet_v2", "tiny", None),
        ("inception_v4", "tiny", None), ("hrnet", "tiny", None), ("unet", "tiny", None)]


def _case_id(case):
    return "-".join(str(c) for c in case[:3])


def _check_spec(spec: ModelSpec, name, variant, task, microbatch, shape):
    assert (spec.name, spec.variant, spec.task, spec.microbatch) == (name, variant, task, microbatch)
    assert isinstance(spec.module, torch.nn.Module) and not spec.module.training
    assert not any(m.training for m in spec.module.modules())
    assert isinstance(spec.example_inputs, tuple) and len(spec.example_inputs) == len(spec.input_names)
    assert all(isinstance(t, torch.Tensor) and t.shape[0] == microbatch for t in spec.example_inputs)
    assert spec.description
    out = spec.run()
    # A plain tensor, not a ModelOutput: torch.export must see a clean graph output.
    assert type(out) is torch.Tensor
    assert tuple(out.shape) == shape
    assert out.dtype == torch.float32
    assert torch.isfinite(out).all()
    # Dropout is off everywhere, so eval mode is not the only thing keeping runs deterministic.
    for m in spec.module.modules():
        if isinstance(m, torch.nn.Dropout):
            assert m.p == 0.0, f"{type(m).__name__} p={m.p}"
    return out


@pytest.mark.parametrize("case", list(FAST_CASES), ids=_case_id)
def test_builds_runs_and_shapes(case):
    name, variant, task, microbatch = case
    spec = get_model(name, variant, microbatch=microbatch, task=task)
    _check_spec(spec, name, variant, task, microbatch, FAST_CASES[case])


@pytest.mark.slow
@pytest.mark.parametrize("case", list(SLOW_CASES), ids=_case_id)
def test_large_variants_build_run_and_shapes(case):
    name, variant, task, microbatch = case
    spec = get_model(name, variant, microbatch=microbatch, task=task)
    _check_spec(spec, name, variant, task, microbatch, SLOW_CASES[case])


def test_every_variant_is_covered():
    listed = {(n, v) for n, vs in list_models().items() for v in vs if n != "minilm"}
    covered = {(c[0], c[1]) for c in list(FAST_CASES) + list(SLOW_CASES)}
    assert listed == covered


def test_list_models():
    models = list_models()
    assert models["bert"] == ("tiny", "base", "large")
    assert models["gpt2"] == ("tiny", "small")
    assert models["resnet"] == ("tiny", "resnet50", "resnet50_v1")
    assert models["whisper"] == ("mini", "tiny", "base")
    assert {"vit", "mobilenet_v1", "mobilenet_v2", "minilm"} <= set(models)
    assert model_entry("bert").tasks == ("encoder", "text_classification")


@pytest.mark.parametrize("name,variant,task", TINY, ids=lambda x: str(x))
def test_same_seed_same_model(name, variant, task):
    rng_before = torch.get_rng_state()
    a = get_model(name, variant, task=task, seed=3)
    b = get_model(name, variant, task=task, seed=3)
    # Building must not disturb the caller's global RNG.
    assert torch.equal(torch.get_rng_state(), rng_before)
    sa, sb = a.module.state_dict(), b.module.state_dict()
    assert sa.keys() == sb.keys()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert all(torch.equal(x, y) for x, y in zip(a.example_inputs, b.example_inputs))
    assert torch.equal(a.run(), b.run())
    c = get_model(name, variant, task=task, seed=4)
    assert not torch.equal(a.run(), c.run())


def test_state_dict_has_no_duplicated_modules():
    # A wrapper that registered the same blocks twice would give parameters two names in a netlist.
    # (Tied weights, like GPT-2's LM head sharing the token embedding, are real sharing and allowed.)
    for name, variant, task in TINY:
        spec = get_model(name, variant, task=task)
        all_modules = list(spec.module.named_modules(remove_duplicate=False))
        assert len(all_modules) == len(list(spec.module.named_modules())), name


def test_default_variant_and_aliases():
    spec = get_model("gpt2", "base", seq_len=8, n_layer=1, n_embd=64, n_head=2)  # shrunk: only the alias matters
    assert spec.variant == "small" and tuple(spec.run().shape) == (1, 8, 50257)
    spec = get_model("resnet", "tiny", image_size=32)
    assert tuple(spec.example_inputs[0].shape) == (1, 3, 32, 32)


def test_sizes_and_overrides():
    spec = get_model("bert", "tiny", seq_len=32, microbatch=3)
    assert tuple(spec.example_inputs[0].shape) == (3, 32, 128)
    spec = get_model("bert", "tiny", task="text_classification", num_labels=5, seq_len=16)
    assert tuple(spec.run().shape) == (1, 5)
    assert spec.input_names == ("input_ids", "attention_mask")
    spec = get_model("vit", "tiny", image_size=32, num_labels=3)
    assert tuple(spec.run().shape) == (1, 3)
    spec = get_model("whisper", "mini", seq_len=64)
    assert tuple(spec.example_inputs[0].shape) == (1, 80, 64)
    assert tuple(spec.run().shape) == (1, 32, 128)
    spec = get_model("gpt2", "tiny", seq_len=16, num_hidden_layers=1)
    assert spec.config.n_layer == 1 and tuple(spec.run().shape) == (1, 16, 1024)


def test_attention_is_eager_and_dropout_zero():
    for name, variant, task in [("bert", "tiny", "encoder"), ("gpt2", "tiny", None), ("vit", "tiny", None),
                                ("whisper", "mini", None)]:
        cfg = get_model(name, variant, task=task).config
        assert cfg._attn_implementation == "eager", name
        drops = {k: v for k, v in cfg.to_dict().items()
                 if isinstance(v, float) and any(s in k for s in ("dropout", "pdrop", "layerdrop"))}
        assert drops and all(v == 0.0 for v in drops.values()), (name, drops)


@pytest.mark.parametrize("kwargs,match", [
    (dict(name="alexnet"), "unknown model"),
    (dict(name="bert", variant="huge"), "no variant"),
    (dict(name="bert", variant="tiny", task="translation"), "no task"),
    (dict(name="bert", variant="tiny", image_size=224), "takes seq_len"),
    (dict(name="vit", variant="tiny", seq_len=16), "takes image_size"),
    (dict(name="bert", variant="tiny", num_hiden_layers=3), "unknown option"),
    (dict(name="bert", variant="tiny", microbatch=0), "microbatch"),
    (dict(name="bert", variant="tiny", seed="x"), "seed"),
    (dict(name="gpt2", variant="tiny", seq_len=1000), "n_positions"),
    (dict(name="whisper", variant="mini", seq_len=63), "even"),
    (dict(name="bert", variant="tiny", task="text_classification", seq_len=600), "max_position_embeddings"),
])
def test_bad_arguments_raise_config_error(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        get_model(**kwargs)


def test_bert_classifier_wrapper_matches_transformers_with_padding():
    spec = get_model("bert", "tiny", task="text_classification", microbatch=2, seq_len=16)
    ids, _ = spec.example_inputs
    mask = torch.ones_like(ids)
    mask[1, 10:] = 0  # second row padded
    with torch.no_grad():
        ours = spec.module(ids, mask)
        ref = spec.module.model(input_ids=ids, attention_mask=mask).logits
        # Padded positions must not matter.
        ids2 = ids.clone()
        ids2[1, 10:] = 7
        ours2 = spec.module(ids2, mask)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours2, ours, rtol=1e-5, atol=1e-5)


def test_vit_wrapper_matches_transformers():
    spec = get_model("vit", "tiny")
    with torch.no_grad():
        ref = spec.module.model(spec.example_inputs[0]).logits
    torch.testing.assert_close(spec.run(), ref, rtol=1e-5, atol=1e-5)


def test_gpt2_wrapper_matches_transformers_and_checks_length():
    spec = get_model("gpt2", "tiny", seq_len=32)
    (ids,) = spec.example_inputs
    with torch.no_grad():
        ref = spec.module.model(input_ids=ids, use_cache=False).logits
        short = spec.module(ids[:, :20])
    torch.testing.assert_close(spec.run(), ref, rtol=1e-5, atol=1e-5)
    # Causal: the first 20 positions do not see the rest.
    torch.testing.assert_close(short, ref[:, :20], rtol=1e-5, atol=1e-5)
    with pytest.raises(InputError):
        spec.module(torch.zeros((1, 33), dtype=torch.long))


# Ops transformers' attention-mask factory emits; none of the wrappers should leave them in the graph.
_MASK_FACTORY_OPS = ("aten.where", "aten.arange", "aten.ge.", "aten.__and__", "aten.new_ones", "aten.index.")


@pytest.mark.parametrize("name,variant,task", TINY, ids=lambda x: str(x))
def test_torch_export_captures_a_clean_graph(name, variant, task):
    spec = get_model(name, variant, task=task)
    program = torch.export.export(spec.module, spec.example_inputs)
    targets = collections.Counter(str(n.target) for n in program.graph.nodes if n.op == "call_function")
    # Whisper looks its positional embedding up with one arange; that one is not mask machinery.
    allowed = {"aten.arange.default"} if name == "whisper" else set()
    assert not [t for t in targets if t.startswith(_MASK_FACTORY_OPS) and t not in allowed], targets
    user_inputs = [s.arg.name for s in program.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
    assert tuple(user_inputs) == spec.input_names
    torch.testing.assert_close(program.module()(*spec.example_inputs), spec.run(), rtol=1e-5, atol=1e-5)


def test_to_pybuda_wraps_the_module():
    import pybuda

    spec = get_model("bert", "tiny", seq_len=32)
    mod = spec.to_pybuda()
    assert isinstance(mod, pybuda.PyTorchModule) and mod.name == "bert_tiny_encoder"
    (out,) = mod.forward(*spec.example_inputs)
    torch.testing.assert_close(out, spec.run())


@pytest.mark.slow
@pytest.mark.parametrize("name,variant", list(PUBLISHED_PARAMS_M), ids=lambda x: str(x))
def test_cnn_parameter_counts_match_the_papers(name, variant):
    spec = get_model(name, variant)
    assert spec.num_parameters() / 1e6 == pytest.approx(PUBLISHED_PARAMS_M[(name, variant)], rel=0.01)


def test_cnn_aliases_and_overrides():
    assert get_model("vovnet_v2", "base").variant == "39"
    assert get_model("hrnet", "tiny", image_size=32).example_inputs[0].shape[-1] == 32
    spec = get_model("inception_v4", "tiny", num_labels=3)
    assert tuple(spec.run().shape) == (1, 3)
    with pytest.raises(ConfigError, match="unknown option"):
        get_model("unet", "tiny", feature=4)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vovnet_v2", "inception_v4", "hrnet", "unet"])
def test_cnn_tiny_compiles_for_the_card(name):
    """The tiny variant compiles (compile-only, no numerics) for an n150 and the performance model runs it."""
    from pybuda.cli.benchmark import _compile_only
    from pybuda.config import CompilerConfig
    from pybuda.perf.model import estimate_compiled

    results, _ = _compile_only(get_model(name, "tiny"), CompilerConfig(device_config="wh_n150"), 2)
    report = estimate_compiled(results, microbatch=2)
    assert report.num_epochs >= 1 and report.samples_per_sec > 0


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(list_models()))
def test_the_largest_variant_compiles_for_an_n150(name):
    """Every zoo model at full size compiles (compile-only) to a netlist that passes validation: ViT-base's
    class-token concat once failed the netlist's L1 rule after the balancer had fitted it."""
    from pybuda.cli.benchmark import _compile_only
    from pybuda.config import CompilerConfig

    spec = get_model(name, list_models()[name][-1])
    results, _ = _compile_only(spec, CompilerConfig(device_config="wh_n150"), 1)
    assert results.netlist is not None and results.netlist.graphs


def test_resnet50_v1_downsamples_in_the_first_1x1_conv():
    # The original ResNet-50 (Keras' ResNet50) strides the bottleneck's 1x1 conv; "v1.5" strides the 3x3.
    def strides(variant):
        model = get_model("resnet", variant).module
        return [(m.kernel_size, m.stride) for m in model.modules()
                if isinstance(m, torch.nn.Conv2d) and m.stride != (1, 1)]

    assert ((1, 1), (2, 2)) in strides("resnet50_v1") and ((3, 3), (2, 2)) not in strides("resnet50_v1")
    assert ((3, 3), (2, 2)) in strides("resnet50")
