"""Hostile netlists: the strict parser is a security boundary (device images and users hand us YAML).

Named attacks (alias bombs, self-referencing aliases, foreign tags, deep nesting, absurd sizes, huge
scalars) and a seeded mutation fuzzer over real netlists (the hand-written fixtures and the netlists
compiled from small models in tests/compile/snapshots). Every input must end in a NetlistError or a
valid parse + validate, quickly and in bounded memory, never in another exception type.
"""

from __future__ import annotations

import copy
import functools
import random
import time
import tracemalloc
from pathlib import Path
from typing import Any, Callable, List

import pytest
import yaml

from pybuda.errors import NetlistError
from pybuda.golden.device import GoldenDevice, check_memory
from pybuda.netlist import parse_yaml, validate
from pybuda.netlist.validate import check

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "netlist" / "fixtures").glob("*.yaml")) + sorted((ROOT / "compile" / "snapshots").glob("*.yaml"))
SPEC = ROOT / "netlist" / "fixtures" / "spec_example.yaml"

#: Per-case bounds of the fuzzer: a hang guard and a memory guard, far above what a 10 kB netlist needs
#: (a few ms, well under 1 MB; the slowest case measured 0.13 s) and far below what the attacks used to cost
#: (81 s to 13 minutes, gigabytes). Generous so that a loaded CI machine never trips it: it catches
#: exponential work, not speed.
CASE_SECONDS = 10.0
CASE_PEAK_BYTES = 32 << 20
# libyaml's emitter/loader when present keeps generating the cases cheap.
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _bomb(levels: int) -> str:
    """The classic "billion laughs": each level a list of 9 aliases of the previous one."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        prev, cur = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def _refused(text: str) -> NetlistError:
    start = time.perf_counter()
    with pytest.raises(NetlistError) as err:
        parse_yaml(text)
    assert time.perf_counter() - start < CASE_SECONDS
    return err.value


# ---------------------------------------------------------------------------------------------------
# Class 1: aliases, tags, nesting
# ---------------------------------------------------------------------------------------------------


def test_alias_bomb_is_refused_before_expansion():
    text = _bomb(10)
    assert len(text) < 500
    err = _refused(text)
    assert "anchors and aliases are not allowed" in str(err)
    assert "line 1, column 4" in str(err) and err.path == "a"


def test_self_referencing_alias_is_refused():
    err = _refused("queues: &r [*r]\n")
    assert "anchor &r" in str(err) and err.path == "queues"


def test_alias_inside_a_real_netlist_names_its_key_path():
    text = SPEC.read_text().replace("df: Bfp8_b,", "df: *fmt,", 1).replace("df: Float16_b,", "df: &fmt Float16_b,", 1)
    err = _refused(text)
    assert err.path == "queues.act.df" and "anchor &fmt" in str(err)


@pytest.mark.parametrize("text, what", [
    ("a: !!python/object/apply:os.system [echo hi]\n", "python/object/apply"),
    ("a: !!binary aGVsbG8=\n", "binary"),
    ("a: !!set {x, y}\n", "set"),
    ("a: !custom 3\n", "!custom"),
    ("a: 2001-12-14\n", "timestamp"),
    ("a: {<<: {b: 1}, c: 2}\n", "merge"),
])
def test_foreign_tags_and_types_are_refused(text, what):
    err = _refused(text)
    assert what in str(err) and "not allowed" in str(err)


def test_deep_nesting_is_refused():
    err = _refused("a: " + "[" * 40 + "]" * 40 + "\n")
    assert "nesting deeper than" in str(err) and err.path.startswith("a[0][0]")
    _refused("[" * 200000)  # libyaml's own limit, still a NetlistError


def test_huge_integer_literal_is_refused():
    err = _refused("a: " + "7" * 5000 + "\n")
    assert "integer literal" in str(err) and err.path == "a"


# ---------------------------------------------------------------------------------------------------
# Class 2: sizes are bounded before anything is enumerated or allocated
# ---------------------------------------------------------------------------------------------------


def _spec_data() -> Any:
    return yaml.safe_load(SPEC.read_text())


@pytest.mark.parametrize("where, value, path", [
    (("graphs", "fwd0", "mm0", "grid_size"), [100000, 100000], "graphs.fwd0.mm0.grid_size[0]"),
    (("queues", "act", "entries"), 10 ** 8, "queues.act.entries"),
    (("queues", "act", "t"), 10 ** 9, "queues.act.t"),
    (("queues", "out", "mblock"), [60000, 60000], "queues.out"),
    (("graphs", "fwd0", "input_count"), 10 ** 12, "graphs.fwd0.input_count"),
    (("graphs", "fwd0", "mm0", "ublock"), [1000, 2], "graphs.fwd0.mm0.ublock[0]"),
])
def test_absurd_sizes_are_refused_by_the_parser(where, value, path):
    data = _spec_data()
    node = data
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    err = _refused(yaml.safe_dump(data))
    assert err.path == path and "largest allowed" in str(err)


def test_validation_stops_at_the_size_gate():
    netlist = parse_yaml(SPEC.read_text())
    netlist.graphs["fwd0"].ops["mm0"].grid_size = (100000, 100000)  # built in Python: the parser never saw it
    start = time.perf_counter()
    errors = check(netlist)
    assert time.perf_counter() - start < CASE_SECONDS
    assert {e.rule for e in errors} == {"netlist_sizes"}
    assert check(netlist, rules=["op_cores_overlap"])[0].rule == "netlist_sizes"  # the gate runs regardless
    with pytest.raises(NetlistError, match=r"grid_size\[0\].*largest allowed"):
        validate(netlist)


def test_golden_device_refuses_huge_queues_before_allocating():
    netlist = parse_yaml(SPEC.read_text())
    netlist.queues["act"].entries = 10 ** 8
    with pytest.raises(NetlistError, match="queues.act.entries"):
        GoldenDevice(netlist)
    netlist.queues["act"].entries = 100000  # within the netlist bounds, but 100000 x 16 tiles of float32
    with pytest.raises(NetlistError, match=r"queues\.act\.entries: the golden device would need .* GiB"):
        GoldenDevice(netlist, memory_limit=1 << 30)
    netlist.queues["act"].entries = 0
    with pytest.raises(NetlistError, match="must be an integer >= 1"):
        check_memory(netlist)


# ---------------------------------------------------------------------------------------------------
# Class 3: error messages quote short prefixes
# ---------------------------------------------------------------------------------------------------


def test_huge_scalar_is_not_quoted_whole():
    text = SPEC.read_text().replace("math_fidelity: HiFi2,", "math_fidelity: " + "H" * 5_000_000 + ",", 1)
    err = _refused(text)
    assert err.path == "graphs.fwd0.mm0.math_fidelity"
    assert len(str(err)) < 1500 and "more characters" in str(err)


def test_huge_key_is_not_quoted_whole():
    text = SPEC.read_text().replace("devices: {arch: wormhole_b0}", "devices: {arch: wormhole_b0}\n" + "k" * 5_000_000 + ": 1")
    err = _refused(text)
    assert len(str(err)) < 1500 and len(err.path) < 400


def test_netlist_error_caps_any_message():
    err = NetlistError("p" * 10_000, "m" * 10_000)
    assert len(str(err)) < 1500


# ---------------------------------------------------------------------------------------------------
# Class 4: seeded mutation fuzzer
# ---------------------------------------------------------------------------------------------------


def _paths(node: Any, prefix=()) -> List[tuple]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, prefix + (i,))
    return out


def _get(node: Any, path: tuple) -> Any:
    for k in path:
        node = node[k]
    return node


_ODD_VALUES = [None, "", "x", "$v", 1.5, True, -1, 0, 2 ** 31, 10 ** 12, -(10 ** 9), [], {}, [100000, 100000],
               [0, 0], [-1, 5], {"r": 10 ** 9}, [[1, 2], [3]], "H" * 100_000]


def _mutate_data(data: Any, rng: random.Random) -> str:
    data = copy.deepcopy(data)
    paths = [p for p in _paths(data) if p]
    path = rng.choice(paths)
    parent, key = _get(data, path[:-1]), path[-1]
    kind = rng.choice(["delete", "rename", "value", "size", "nest", "dup_list"])
    if kind == "delete":
        del parent[key]
    elif kind == "rename" and isinstance(parent, dict):
        parent[f"{key}_x" if rng.random() < 0.5 else rng.choice(["alias", "type", "t", 7, "input_0_tms"])] = parent.pop(key)
    elif kind == "size" and isinstance(parent[key], int):
        parent[key] = rng.choice([0, -1, -(2 ** 40), 2 ** 20, 10 ** 6, 10 ** 9, 2 ** 63, 10 ** 30])
    elif kind == "nest":
        value = parent[key]
        for _ in range(rng.choice([2, 10, 31, 40])):
            value = [value] if rng.random() < 0.5 else {"k": value}
        parent[key] = value
    elif kind == "dup_list" and isinstance(parent[key], list):
        parent[key] = parent[key] * rng.choice([2, 200])
    else:
        parent[key] = copy.deepcopy(rng.choice(_ODD_VALUES))
    return yaml.dump(data, Dumper=_DUMPER, width=1 << 20)


def _mutate_text(text: str, rng: random.Random) -> str:
    lines = text.splitlines(keepends=True)
    kind = rng.choice(["truncate", "dup_line", "anchor", "alias", "bomb", "garbage", "tag", "delete_line"])
    i = rng.randrange(len(lines))
    if kind == "truncate":
        return text[:rng.randrange(len(text))]
    if kind == "dup_line":
        return "".join(lines[:i + 1] + [lines[i]] + lines[i + 1:])
    if kind == "delete_line":
        return "".join(lines[:i] + lines[i + 1:])
    if kind in ("anchor", "alias"):
        target = ": &z " if kind == "anchor" else ": *z "
        return "".join(lines[:i] + [lines[i].replace(": ", target, 1)] + lines[i + 1:])
    if kind == "bomb":
        return _bomb(rng.choice([3, 8, 10])) + text
    if kind == "tag":
        return "".join(lines[:i] + [lines[i].replace(": ", rng.choice([": !!binary ", ": !!python/name:os.system ",
                                                                      ": !x ", ": !!set "]), 1)] + lines[i + 1:])
    pos = rng.randrange(len(text))
    return text[:pos] + rng.choice(["\t", "{", "]", ":", "- ", "\x00", "\ufeff", "'", "&", "*", "%YAML 1.1\n"]) + text[pos:]


@functools.lru_cache(maxsize=1)
def _cases() -> List[tuple]:
    rng = random.Random(20240611)
    cases = []
    for source in SOURCES:
        text = source.read_text()
        data = yaml.load(text, Loader=_LOADER)
        for n in range(12):
            mutate: Callable = _mutate_data if n % 2 else _mutate_text
            cases.append((f"{source.stem}-{n}", mutate(data if n % 2 else text, rng)))
    return cases


def test_fuzz_cases_are_many_and_sources_valid():
    assert len(SOURCES) >= 5 and len(_cases()) >= 100
    for source in SOURCES:
        netlist = parse_yaml(source.read_text())
        if isinstance(netlist.devices_arch, str):  # multi-arch fixtures need a device to validate
            validate(netlist)


def test_mutated_netlists_end_in_netlist_error_quickly_and_in_bounded_memory():
    outcomes = {"error": 0, "valid": 0}
    for index, (name, text) in enumerate(_cases()):
        # tracemalloc slows parsing ~5x: every third case is measured, which still covers each mutation kind.
        traced = index % 3 == 0
        if traced:
            tracemalloc.start()
        start = time.perf_counter()
        try:
            netlist = parse_yaml(text)
            validate(netlist)
            check_memory(netlist)
            outcomes["valid"] += 1
        except NetlistError as e:
            assert len(str(e)) < 1500, name
            outcomes["error"] += 1
        except Exception as e:  # pragma: no cover - the failure being tested for
            pytest.fail(f"{name}: {type(e).__name__}: {e!s:.300}")
        finally:
            elapsed = time.perf_counter() - start
            peak = tracemalloc.get_traced_memory()[1] - len(text) * 4 if traced else 0  # minus the text itself
            if traced:
                tracemalloc.stop()
        assert elapsed < CASE_SECONDS, f"{name} took {elapsed:.2f}s"
        assert peak < CASE_PEAK_BYTES, f"{name} peaked at {peak >> 20} MiB"
    assert outcomes["error"] > 50, outcomes
