"""Every way a device image can be wrong is an ImageError with a clear message, and loading never runs code
from the file. Each test crafts its own archive from a real image."""

import hashlib
import io
import json
import os
import pickle
import tarfile

import pytest
import torch

import pybuda
from pybuda.errors import ImageError
from pybuda.tti.archive import IMAGE_FORMAT, MANIFEST, read_archive, write_archive


class Small(pybuda.PyBudaModule):
    def __init__(self, name="small"):
        super().__init__(name)
        self.w = pybuda.Parameter(torch.randn(32, 32, generator=torch.Generator().manual_seed(0)),
                                  requires_grad=False)

    def forward(self, x):
        return pybuda.op.Relu("relu", pybuda.op.Matmul("mm", x, self.w))


@pytest.fixture(scope="module")
def image_files(tmp_path_factory):
    """The members of a real image (without its manifest)."""
    path = tmp_path_factory.mktemp("img") / "small.tti"
    device = pybuda.TTDevice("tt0", module=Small())
    device.compile_to_image(img_path=str(path), sample_inputs=(torch.randn(1, 32, 32),))
    pybuda.pybuda_reset()
    files = read_archive(str(path))
    files.pop(MANIFEST)
    return files


def _manifest(files, version="1.0.0"):
    return {"format": IMAGE_FORMAT, "image_version": version,
            "files": {n: {"size": len(d), "sha256": hashlib.sha256(d).hexdigest()} for n, d in sorted(files.items())}}


def _tar(path, members, manifest=None, links=()):
    """Write a tar with ``members`` (name -> bytes), a manifest (dict, or None for none) and extra link members."""
    with tarfile.open(path, "w") as tar:
        items = dict(members)
        if manifest is not None:
            items[MANIFEST] = json.dumps(manifest).encode()
        for name, data in items.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, kind, target in links:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, target
            tar.addfile(info)
    return str(path)


def _load(path, **kw):
    return pybuda.TTDeviceImage.load_from_disk(path, **kw)


def test_the_untouched_image_loads(image_files, tmp_path):
    image = _load(_tar(tmp_path / "ok.tti", image_files, _manifest(image_files)))
    assert image.modules == ["small"]


def test_wrong_image_version(image_files, tmp_path):
    with pytest.raises(ImageError, match="image version '0.9.0'.*reads version"):
        _load(_tar(tmp_path / "v.tti", image_files, _manifest(image_files, version="0.9.0")))


def test_file_altered_after_writing(image_files, tmp_path):
    files = dict(image_files)
    name = next(n for n in files if n.endswith("_netlist.yaml"))
    manifest = _manifest(files)
    files[name] = files[name].replace(b"grid_size", b"grid_size ", 1)
    with pytest.raises(ImageError, match="does not match its SHA-256"):
        _load(_tar(tmp_path / "h.tti", files, manifest))


def test_missing_file(image_files, tmp_path):
    files = dict(image_files)
    manifest = _manifest(files)
    del files["device.json"]
    with pytest.raises(ImageError, match="lacks file.*device.json"):
        _load(_tar(tmp_path / "m.tti", files, manifest))


def test_extra_file(image_files, tmp_path):
    files = dict(image_files)
    manifest = _manifest(files)
    files["notes.json"] = b"{}"
    with pytest.raises(ImageError, match="does not list.*notes.json"):
        _load(_tar(tmp_path / "e.tti", files, manifest))


def test_no_manifest(image_files, tmp_path):
    with pytest.raises(ImageError, match="no manifest.json"):
        _load(_tar(tmp_path / "n.tti", image_files, None))


@pytest.mark.parametrize("bad_name", ["/etc/passwd.json", "../escape.json", "tensors/../../escape.json",
                                      "C:\\evil.json"])
def test_member_path_leaving_the_folder(image_files, tmp_path, bad_name):
    files = dict(image_files)
    files[bad_name] = b"{}"
    with pytest.raises(ImageError, match="absolute|climbs out|non-POSIX"):
        _load(_tar(tmp_path / "p.tti", files, _manifest(files)))


@pytest.mark.parametrize("kind", [tarfile.SYMTYPE, tarfile.LNKTYPE])
def test_link_members(image_files, tmp_path, kind):
    with pytest.raises(ImageError, match="link"):
        _load(_tar(tmp_path / "l.tti", image_files, _manifest(image_files),
                   links=[("tensors/evil.safetensors", kind, "/etc/passwd")]))


class _Boom:
    def __reduce__(self):
        return (os.system, ("echo pwned > pwned.txt",))


def test_pickle_is_refused_and_never_loaded(image_files, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    payload = pickle.dumps(_Boom())
    for name in ("tensors/small.safetensors", "Optimizer.SGD.pkl", "device.json"):
        files = dict(image_files)
        files[name] = payload
        with pytest.raises(ImageError, match="pickle"):
            _load(_tar(tmp_path / "k.tti", files, _manifest(files)))
    assert not (tmp_path / "pwned.txt").exists()


def test_code_is_refused(image_files, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("module_files/model.py", "hooks.pyc", "lib.so"):
        files = dict(image_files)
        files[name] = b"open('pwned.txt', 'w').write('x')\n"
        with pytest.raises(ImageError, match="Python code|unknown kind"):
            _load(_tar(tmp_path / "c.tti", files, _manifest(files)))
    assert not (tmp_path / "pwned.txt").exists()


def test_truncated_archive(image_files, tmp_path):
    path = _tar(tmp_path / "t.tti", image_files, _manifest(image_files))
    data = open(path, "rb").read()
    for cut in (len(data) // 2, 700, 10):
        with open(tmp_path / "cut.tti", "wb") as f:
            f.write(data[:cut])
        with pytest.raises(ImageError, match="truncated|not a complete|not a device image|corrupt"):
            _load(str(tmp_path / "cut.tti"))


def test_image_over_the_size_limit(image_files, tmp_path):
    path = _tar(tmp_path / "big.tti", image_files, _manifest(image_files))
    with pytest.raises(ImageError, match="over the limit"):
        _load(path, max_bytes=os.path.getsize(path) - 1)


def test_not_a_tar_and_compressed(tmp_path):
    (tmp_path / "junk.tti").write_bytes(b"\x00" * 10 + b"not a tar" * 100)
    with pytest.raises(ImageError, match="not a device image|truncated|corrupt"):
        _load(str(tmp_path / "junk.tti"))
    with tarfile.open(tmp_path / "gz.tti", "w:gz") as tar:
        info = tarfile.TarInfo("device.json")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"{}"))
    with pytest.raises(ImageError, match="uncompressed|not a device image"):
        _load(str(tmp_path / "gz.tti"))


def test_tampered_contents_with_a_consistent_manifest(image_files, tmp_path):
    """An attacker can rewrite the manifest too: the contents are still parsed strictly."""
    cases = {
        "device.json": lambda d: d.replace(b'"arch": "Grayskull"', b'"arch": "Quantum"'),
        "compile_and_runtime_config.json": lambda d: b"[1, 2",
        # A host rounding no multiplier reads: refused, not applied to the weights.
        "device.json (rounding)": lambda d: d.replace(b'"mantissa_bits": null', b'"mantissa_bits": 99', 1),
    }
    netlist = next(n for n in image_files if n.endswith("_netlist.yaml"))
    cases[netlist] = lambda d: b"!!python/object/apply:os.system ['echo pwned']\n"
    for case, change in cases.items():
        name = case.split(" ")[0]
        files = dict(image_files)
        assert change(files[name]) != files[name], case
        files[name] = change(files[name])
        with pytest.raises(ImageError):
            _load(_tar(tmp_path / "x.tti", files, _manifest(files)))
    # A tensor of the wrong shape for its parameter.
    from safetensors.torch import load, save

    files = dict(image_files)
    tensors = load(files["tensors/small.safetensors"])
    key = next(iter(tensors))
    tensors[key] = torch.zeros(3, 3)
    files["tensors/small.safetensors"] = save(tensors)
    with pytest.raises(ImageError, match="recorded as|holds"):
        _load(_tar(tmp_path / "s.tti", files, _manifest(files)))


def test_writer_round_trip_is_deterministic(image_files, tmp_path):
    a = write_archive(tmp_path / "a.tti", image_files, "1.0.0")
    b = write_archive(tmp_path / "b.tti", image_files, "1.0.0")
    assert a == b and open(tmp_path / "a.tti", "rb").read() == open(tmp_path / "b.tti", "rb").read()
    assert {k: v for k, v in read_archive(str(tmp_path / "a.tti")).items() if k != MANIFEST} == image_files


def test_backend_build_is_parsed_strictly_when_read(image_files, tmp_path):
    """Running needs no backend build, so loading only checks its hashes; reading it (reports, tools) parses it
    strictly, and a tampered file with a rewritten manifest is an ImageError then."""
    from pybuda.tti.load import image_build

    files = dict(image_files)
    name = next(n for n in files if n.endswith("pipes.json"))
    files[name] = b"!!python/object/apply:os.system ['echo pwned']\n"
    image = _load(_tar(tmp_path / "b.tti", files, _manifest(files)))
    with pytest.raises(ImageError, match="pipes.json"):
        image_build(image)
    good = _load(_tar(tmp_path / "g.tti", image_files, _manifest(image_files)))
    assert image_build(good).epochs
