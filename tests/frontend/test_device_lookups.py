"""Lookups by ids pushed at run time, on the device: embeddings of tables of any size up to
``lookups.EMBEDDING_MAX_ROWS`` (a chunked one-hot: the host pushes each id as the digits id // 2048 and
id % 2048, which the chip's 19-bit source registers hold exactly), gathers by pushed ids (``x[ids]``), negative ids
where the framework counts them from the end, and ids outside the table refused at push time.

Each looked-up row must be bit for bit the table row as the chip stores it: the one-hot matmul copies it (at a
fidelity that reads Float16_b and Bfp8 data whole; at Float32 ``exact_pickers`` copies it in pieces; a Grayskull
Dest holds Float16_b, so at Float32 there the copy is the table truncated to Float16_b).
"""

import pytest
import torch

import pybuda
from pybuda.dtypes import DataFormat, MathFidelity
from pybuda.errors import InputError, UnsupportedOpError
from pybuda.frontend.torch import capture
from pybuda.golden import formats
from pybuda.netlist.host_io import from_canonical, to_canonical
from pybuda.passes.graph.lookups import EMBEDDING_CHUNK, EMBEDDING_MAX_ROWS

VOCAB = 5000  # three chunks of 2,048 rows
DIM = 16
WH, GS = pybuda.BackendDevice.Wormhole_B0, pybuda.BackendDevice.Grayskull


class Lookup(torch.nn.Module):
    def __init__(self, vocab: int = VOCAB, dim: int = DIM):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, dim)

    def forward(self, ids):
        return self.emb(ids)


class Indexing(torch.nn.Module):
    """numpy-style indexing by pushed ids, which torch lets count from the end: rows of a parameter, columns of
    an activation and its last dim."""

    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(VOCAB, DIM))

    def forward(self, x, ids, cols):
        return self.table[ids], x[:, cols], x.transpose(1, 2)[:, :, cols]


def _ids(vocab: int = VOCAB, low: int = 0) -> torch.Tensor:
    """Chunk edges and random ids, [1, 24]."""
    edges = torch.tensor([0, EMBEDDING_CHUNK - 1, EMBEDDING_CHUNK, 2 * EMBEDDING_CHUNK - 1, 2 * EMBEDDING_CHUNK,
                          vocab - 1])
    rand = torch.randint(low, vocab, (18,), generator=torch.Generator().manual_seed(3))
    return torch.cat([edges[edges < vocab], rand])[None, :24]


def _run(module, inputs, arch, df=None, fidelity=None):
    pybuda.remove_cpu_fallback_ops("embedding")
    if df is not None:
        pybuda.set_configuration_options(default_df_override=df)
    if fidelity is not None:
        pybuda.set_configuration_options(default_math_fidelity=fidelity)
    tt = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("lookup", module), arch=arch)
    outs = pybuda.run_inference(inputs=[inputs]).get(timeout=300)
    assert tt.cpu_fallback_device_pre is None and tt.cpu_fallback_device_post is None
    return [o.value().float() for o in outs]


def _stored(table: torch.Tensor, df, arch) -> torch.Tensor:
    """The table as the chip copies it: rounded to its format in the tile layout (Bfp blocks are rows of 16);
    a Grayskull Dest holds Float16_b."""
    df = DataFormat.Float16_b if df is None else df
    if arch == GS and df == DataFormat.Float32:
        df = DataFormat.Float16_b
    return from_canonical(formats.quantize(to_canonical(table.detach()), df), table.shape)


@pytest.mark.parametrize("arch", [WH, GS], ids=["wormhole", "grayskull"])
@pytest.mark.parametrize("df", [None, DataFormat.Float32, DataFormat.Bfp8_b], ids=["default", "float32", "bfp8_b"])
def test_a_table_beyond_2048_rows_is_looked_up_exactly_on_the_device(arch, df):
    torch.manual_seed(0)
    model = Lookup().eval()
    ids = _ids()
    (got,) = _run(model, (ids,), arch, df)
    want = _stored(model.emb.weight, df, arch)[ids]
    assert torch.equal(got, want), (got - want).abs().max()
    if df == DataFormat.Float32 and arch == WH:
        assert torch.equal(got, model(ids).detach())  # bit for bit torch's own lookup


def test_the_copy_reads_the_table_whole_at_lofi():
    """A LoFi matmul would read 4 fraction bits of a Bfp8_b table: the lookup's one-hot matmul keeps HiFi2."""
    torch.manual_seed(1)
    model = Lookup().eval()
    ids = _ids()
    (got,) = _run(model, (ids,), WH, DataFormat.Bfp8_b, MathFidelity.LoFi)
    assert torch.equal(got, _stored(model.emb.weight, DataFormat.Bfp8_b, WH)[ids])


def test_embedding_stays_on_the_cpu_by_default_and_a_huge_table_says_why():
    ids = _ids()
    (op,) = capture(Lookup().eval(), (ids,), config=pybuda.CompilerConfig(), for_device=True).report.fallback_ops
    assert op.reason == "'embedding' is in cpu_fallback_ops"
    huge = Lookup(EMBEDDING_MAX_ROWS + 1, 1).eval()
    (op,) = capture(huge, (ids,), config=pybuda.CompilerConfig(cpu_fallback_ops=[]), for_device=True).report.fallback_ops
    assert f"of {EMBEDDING_MAX_ROWS + 1} rows" in op.reason and f"at most {EMBEDDING_MAX_ROWS} rows" in op.reason


class TwoTables(torch.nn.Module):
    def __init__(self, small: int):
        super().__init__()
        self.a, self.b = torch.nn.Embedding(VOCAB, DIM), torch.nn.Embedding(small, DIM)

    def forward(self, ids):
        return self.a(ids) + self.b(ids)


def test_lookups_of_the_same_ids_share_one_push_or_say_why_not():
    config = pybuda.CompilerConfig(cpu_fallback_ops=[])
    ids = _ids(1000)
    # Both tables take digits (3000 > 2048 rows): one push of the ids serves both.
    assert capture(TwoTables(3000).eval(), (ids,), config=config, for_device=True).report.fallback_ops == []
    torch.manual_seed(2)
    model = TwoTables(3000).eval()
    (got,) = _run(model, (ids,), WH, DataFormat.Float32)
    assert torch.allclose(got, model(ids).detach(), atol=1e-6)
    # A small table takes the ids whole: the two lookups need different pushes.
    ops = capture(TwoTables(100).eval(), (_ids(100),), config=config, for_device=True).report.fallback_ops
    assert ops and all("one push serves one way" in op.reason for op in ops)


def test_numpy_style_indexing_by_negative_pushed_ids_runs_on_the_device():
    torch.manual_seed(4)
    model = Indexing().eval()
    x = torch.randn(1, 50, 8)
    ids = _ids(VOCAB, low=-VOCAB)
    cols = torch.randint(-50, 50, (1, 20), generator=torch.Generator().manual_seed(5))
    assert (ids < 0).any() and (cols < 0).any()
    got = _run(model, (x, ids, cols), WH, DataFormat.Float32)
    for g, w in zip(got, model(x, ids, cols)):
        assert torch.equal(g, w.detach())


def test_ids_outside_the_table_are_refused_at_push():
    torch.manual_seed(0)
    model = Lookup().eval()
    ids = _ids()
    _run(model, (ids,), WH)
    with pytest.raises(InputError, match=rf"compiled for \[0, {VOCAB - 1}\].*first value outside: {VOCAB}"):
        pybuda.run_inference(inputs=[(_with(ids, VOCAB),)]).get(timeout=120)
    # torch.nn.functional.embedding refuses a negative id: so does the device
    with pytest.raises(InputError, match=r"first value outside: -1"):
        pybuda.run_inference(inputs=[(_with(ids, -1),)]).get(timeout=120)


def _with(ids: torch.Tensor, value: int) -> torch.Tensor:
    out = ids.clone()
    out[0, 5] = value
    return out


def test_negative_ids_beyond_the_table_are_refused_at_push():
    torch.manual_seed(4)
    model = Indexing().eval()
    x, cols, ids = torch.randn(1, 50, 8), torch.tensor([[-50, 49]]), _ids(VOCAB, low=-VOCAB)
    _run(model, (x, ids, cols), WH)
    with pytest.raises(InputError, match=rf"\[-{VOCAB}, {VOCAB - 1}\].*negative ones counting from the end.*"
                                         rf"first value outside: -{VOCAB + 1}"):
        pybuda.run_inference(inputs=[(x, _with(ids, -VOCAB - 1), cols)]).get(timeout=120)
    with pytest.raises(InputError, match=r"\[-50, 49\].*first value outside: 50"):
        pybuda.run_inference(inputs=[(x, ids, torch.tensor([[50, 0]]))]).get(timeout=120)


def test_a_device_image_pushes_the_digits_itself(tmp_path):
    """The host's half of the lookup (``lookup_digits``) is a host TM of the image's input record: an image loaded
    from disk pushes the digits and refuses ids outside the table without the compiler."""
    torch.manual_seed(6)
    model = Lookup().eval()
    ids = _ids()
    pybuda.remove_cpu_fallback_ops("embedding")
    pybuda.set_configuration_options(default_df_override=DataFormat.Float32)
    device = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("lookup", model), arch=WH)
    path = str(tmp_path / "lookup.tti")
    device.compile_to_image(img_path=path, sample_inputs=(ids,))
    pybuda.pybuda_reset()
    pybuda.TTDevice.load_image(img=pybuda.TTDeviceImage.load_from_disk(path))
    (got,) = pybuda.run_inference(inputs=[(ids,)]).get(timeout=300)
    assert torch.equal(got.value().float(), model(ids).detach())
    with pytest.raises(InputError, match=rf"first value outside: {VOCAB}"):
        pybuda.run_inference(inputs=[(_with(ids, VOCAB),)]).get(timeout=120)


def test_a_large_table_trains_on_the_device():
    """The lookup's gradient is the one-hot matmul's (onehot^T @ grad): SGD steps of a 3,000-row table on the
    device track torch's."""
    import copy
    import queue

    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.emb, self.lin = torch.nn.Embedding(3000, DIM), torch.nn.Linear(DIM, DIM)

        def forward(self, ids):
            return self.lin(self.emb(ids))

    model = Head()
    twin = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(0)
    data = [(torch.randint(0, 3000, (1, 6), generator=gen), torch.randn(1, 6, DIM, generator=gen)) for _ in range(3)]
    pybuda.remove_cpu_fallback_ops("embedding")
    pybuda.set_configuration_options(default_df_override=DataFormat.Float32)
    tt0 = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("head", model), arch=WH,
                          optimizer=pybuda.optimizers.SGD(learning_rate=0.05))
    cpu = pybuda.CPUDevice("cpu0")
    cpu.place_loss_module(pybuda.PyTorchModule("mse", torch.nn.MSELoss()))
    for ids, target in data:
        tt0.push_to_inputs(ids)
        cpu.push_to_target_inputs(target)
    losses = queue.Queue()
    pybuda.run_training(steps=len(data), loss_queue=losses)
    got = [float(losses.get()[0].value()) for _ in data]
    assert tt0.cpu_fallback_device_pre is None
    opt = torch.optim.SGD(twin.parameters(), lr=0.05)
    want = []
    for ids, target in data:
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(twin(ids), target)
        loss.backward()
        opt.step()
        want.append(loss.item())
    assert got == pytest.approx(want, rel=2e-3)


def test_a_microbatch_of_two_pushes_each_samples_digits():
    """The host applies lookup_digits to the whole push, whose dim 0 holds the samples: the digits keep it there."""
    torch.manual_seed(7)
    model = Lookup().eval()
    ids = torch.cat([_ids(), _ids().flip(1)])
    (got,) = _run(model, (ids,), WH, DataFormat.Float32)
    assert got.shape == (2, 24, DIM)
    assert torch.equal(got, model(ids).detach())


class Reshaped(torch.nn.Module):
    """GPT-2's ``input_ids.view(-1, n)`` before its word lookup, and ids transposed before a lookup."""

    def __init__(self, transpose: bool):
        super().__init__()
        self.emb, self.transpose = torch.nn.Embedding(VOCAB, DIM), transpose

    def forward(self, ids):
        return self.emb(ids.transpose(0, 1) if self.transpose else ids.view(-1, 12))


def test_ids_reshaped_after_the_push_are_looked_up_and_transposed_ones_say_why():
    torch.manual_seed(8)
    model = Reshaped(transpose=False).eval()
    ids = _ids()
    (got,) = _run(model, (ids,), WH, DataFormat.Float32)
    assert torch.equal(got, model(ids).detach())
    config = pybuda.CompilerConfig(cpu_fallback_ops=[])
    ops = capture(Reshaped(transpose=True).eval(), (ids,), config=config, for_device=True).report.fallback_ops
    assert any("transposed after the push" in op.reason for op in ops), [op.reason for op in ops]


class LookupAndMore(torch.nn.Module):
    """Ids pushed once, looked up in a table beyond 2,048 rows (as digits) and read by another op too: the lookup
    first or the other reader first."""

    def __init__(self, lookup_first: bool, gather: bool = False):
        super().__init__()
        self.lookup_first, self.gather = lookup_first, gather
        self.table = torch.nn.Parameter(torch.randn(VOCAB, DIM))

    def forward(self, ids, x):
        if not self.lookup_first:
            scaled = ids.float() * 2
        rows = self.table[ids] if self.gather else torch.nn.functional.embedding(ids, self.table)
        if self.lookup_first:
            scaled = ids.float() * 2
        return rows + x, scaled


@pytest.mark.parametrize("lookup_first", [True, False], ids=["lookup_first", "other_reader_first"])
@pytest.mark.parametrize("gather", [False, True], ids=["embedding", "gather"])
def test_a_direct_compile_names_a_lookup_whose_digit_ids_another_op_reads(lookup_first, gather):
    """pybuda_compile has no CPU fallback: the lookup is an UnsupportedOpError with the capability check's reason
    (was a CompileError about the helper op 'lookup_digits' having no device implementation)."""
    pybuda.remove_cpu_fallback_ops("embedding")
    ids, x = _ids(), torch.randn(1, 24, DIM)
    with pytest.raises(UnsupportedOpError) as err:
        pybuda.pybuda_compile(pybuda.PyTorchModule("m", LookupAndMore(lookup_first, gather).eval()), "m", ids, x,
                              compiler_cfg=pybuda.CompilerConfig(cpu_fallback_ops=[], device_config="wh_n150"))
    message = str(err.value)
    assert "lookup_digits" not in message
    assert ("'adv_index'" if gather else "'embedding'") in message and f"of {VOCAB} rows" in message
    assert "as digits" in message and "reads them too" in message


@pytest.mark.parametrize("lookup_first", [True, False], ids=["lookup_first", "other_reader_first"])
def test_through_a_ttdevice_such_a_lookup_runs_on_the_cpu_whichever_reader_comes_first(lookup_first):
    """The capability check runs as each op is mapped, so a reader mapped after the lookup was not seen: the lookup
    stayed on the device and the compile failed (lookup_digits has no device implementation)."""
    pybuda.remove_cpu_fallback_ops("embedding")
    pybuda.set_configuration_options(default_df_override=DataFormat.Float32)
    torch.manual_seed(5)
    model = LookupAndMore(lookup_first).eval()
    ids, x = _ids(), torch.randn(1, 24, DIM)
    tt = pybuda.TTDevice("tt0", module=pybuda.PyTorchModule("m", model), arch=WH)
    got = [o.value().float() for o in pybuda.run_inference(inputs=[(ids, x)]).get(timeout=300)]
    report = tt.cpu_fallback_device_pre or tt.cpu_fallback_device_post
    assert report is not None  # the lookup ran on the host
    for g, w in zip(got, model(ids, x)):  # ids * 2 is float arithmetic on the device: its multiplier's rounding
        assert torch.allclose(g, w.detach(), atol=1e-2, rtol=2e-3)
