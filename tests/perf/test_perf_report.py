"""Report files: perf_report.csv / .json / .html, and the HTML rendered in headless Chromium without
console errors."""

import csv
import html
import json
import os
import re
import shutil
import subprocess

import pytest

from perf_netlists import graph, netlist, op, program, queue, stream
from pybuda.perf.model import estimate
from pybuda.perf.report import OP_COLUMNS, to_html, write_reports
from pybuda.dtypes import MathFidelity as MF


def _report():
    """Two epochs: a nop, then a matmul with a prologue weight and a softmax-like exp on a 2x2 grid."""
    qs = [queue("act", mblock=(2, 2), ublock=(2, 2), entries=8),
          queue("e2e", input="n0", mblock=(2, 2), ublock=(2, 2), entries=4, channels=(1,)),
          queue("w", grid=(1, 2), mblock=(2, 2), ublock=(2, 2), entries=1, channels=(2, 3)),
          queue("out", input="ex", grid=(2, 2), mblock=(1, 1), ublock=(2, 2), entries=8, loc="host")]
    g0 = graph("g0", [op("n0", "nop", ["act"], mblock=(2, 2), ublock=(2, 2))])
    mm = op("mm<&>", "matmul", ["e2e", "w"], grid=(1, 2), mblock=(2, 2), ublock=(2, 2), fidelity=MF.HiFi4,
            attrs={"m_k": 2, "u_kt": 2})
    ex = op("ex", "exp", ["mm<&>"], grid=(2, 2), loc=(1, 0), mblock=(1, 1), ublock=(2, 2), transpose=True)
    g1 = graph("g1", [mm, ex])
    prog = program([("g0", {"act": stream()}), ("g1", {"e2e": stream(), "w": stream(prologue=True)})])
    return estimate(netlist(qs, [g0, g1], prog), "wh_n150")


def test_csv_and_json(tmp_path):
    report = _report()
    paths = write_reports(report, tmp_path / "build")
    assert {p.name for p in paths.values()} == {"perf_report.csv", "perf_report.json", "perf_report.html"}
    with paths["csv"].open() as fh:
        rows = list(csv.DictReader(fh))
    assert tuple(rows[0]) == tuple(OP_COLUMNS)
    assert [r["name"] for r in rows] == ["n0", "mm<&>", "ex"]
    mm = rows[1]
    assert mm["grid_size"] == "1x2" and mm["mblock"] == "2x2" and mm["grid_loc"] == "0,0"
    assert int(mm["cycles"]) == report.op("mm<&>").cycles and mm["bound"] == report.op("mm<&>").bound
    data = json.loads(paths["json"].read_text())
    assert data["epochs"] == 2 and data["samples_per_sec"] == pytest.approx(report.samples_per_sec)
    assert [e["bottleneck_op"] for e in data["epoch_table"]] == [e.bottleneck_op for e in report.epochs]
    assert data["config"]["binary_cache_slots"] == 32


def test_html_is_self_contained_and_complete():
    report = _report()
    page = to_html(report)
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", page), "no external resources"
    assert "http://" not in page and "https://" not in page
    for row in report.ops:
        assert f'data-op="{html.escape(row.name, quote=True)}"' in page
    # every core of every op is drawn, and its title names the op model
    assert page.count('class="core used') == sum(r.cores for r in report.ops)
    assert "mblock 2x2, ublock 2x2" in page and "u_kt 2" in page
    assert page.count('class="bar-row epoch-bar"') == 2
    assert "mm&lt;&amp;&gt;" in page and "mm<&>" not in page.replace("<script>", "")


# --- Chromium ------------------------------------------------------------------------------------------

_CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                   "--disable-component-update", "--disable-sync", "--no-first-run", "--enable-logging=stderr",
                   "--v=0", "--dump-dom"]


def _find_chromium():
    for name in ("chromium", "chromium-browser", "/usr/bin/chromium"):
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.fixture(scope="session")
def chromium():
    """The chromium binary; installed with apt-get when missing and possible (root), else skip."""
    path = _find_chromium()
    if path is None and hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get"):
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        try:
            subprocess.run(["apt-get", "update", "-qq"], check=True, capture_output=True, timeout=300, env=env)
            subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], check=True, capture_output=True,
                           timeout=600, env=env)
        except (subprocess.SubprocessError, OSError):
            pass
        path = _find_chromium()
    if path is None:
        pytest.skip("chromium is not installed and could not be installed (needs root and apt-get: "
                    "`apt-get install -y chromium`)")
    return path


def _render(chromium, page, tmp_path):
    """(DOM after scripts ran, console messages) of an HTML file in headless Chromium."""
    profile = tmp_path / "profile"
    proc = subprocess.run([chromium, *_CHROMIUM_FLAGS, f"--user-data-dir={profile}", page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    return proc.stdout, console


def test_html_renders_in_chromium_without_console_errors(chromium, tmp_path):
    report = _report()
    page = write_reports(report, tmp_path)["html"]
    dom, console = _render(chromium, page, tmp_path)
    assert console == [], console
    assert 'data-ready="1"' in dom, "the report's script did not run to the end"
    for element in ('id="summary"', 'id="epoch-bars"', 'id="op-table"', 'class="grid"'):
        assert element in dom
    assert dom.count("<tr") == 10 + 1 + len(report.ops)  # summary rows, table header, one row per op
    assert dom.count('class="core used') == sum(r.cores for r in report.ops)


def test_chromium_check_catches_script_errors(chromium, tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><script>undefinedFunction();</script></body></html>")
    _, console = _render(chromium, bad, tmp_path)
    assert any("undefinedFunction" in line for line in console)
