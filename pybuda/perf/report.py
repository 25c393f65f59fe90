"""Performance report files: ``perf_report.csv``, ``perf_report.json`` and ``perf_report.html``.

* CSV: one row per op (the per-op table of :class:`~pybuda.perf.model.PerfReport`).
* JSON: the whole report — summary, parameters, per-epoch table, per-op table.
* HTML: a self-contained page (inline CSS and JS, no external URL): the summary, per-epoch cycle bars
  (switch / fill / steady state), the placement grid of every epoch with each core coloured by its op
  (hovering a core shows the op's model — grid, t, mblock, ublock, u_kt — and its cycles, and highlights
  the op's other cores), and a sortable op table; given the backend build's pipes (``routes``), also
  an SVG per epoch of the NoC with every pipe drawn along its hops (:func:`routes_svg`).
"""

from __future__ import annotations

import csv
import hashlib
import html
import json
import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from pybuda.perf.model import OpPerf, PerfReport

__all__ = ["OP_COLUMNS", "write_reports", "write_csv", "write_json", "write_html", "to_html", "routes_svg"]

#: Columns of the per-op CSV, in order.
OP_COLUMNS: Sequence[str] = (
    "epoch", "chip", "graph", "name", "type", "op_class", "grid_loc", "grid_size", "grid_transpose", "cores", "t",
    "mblock", "ublock", "m_k", "u_kt", "math_fidelity", "out_df", "kernel_cycles", "noc_cycles", "dram_cycles",
    "pcie_cycles", "eth_cycles", "cycles", "bound", "ideal_math_cycles", "math_utilization", "core_utilization",
    "latency_cycles", "flops_per_input", "bottleneck",
)

PathLike = Union[str, "os.PathLike[str]"]


def _cell(value: Any, key: str = "") -> Any:
    if key == "grid_loc" and isinstance(value, (tuple, list)):
        return ",".join(str(v) for v in value)  # a coordinate, not a shape
    if isinstance(value, (tuple, list)):
        return "x".join(str(v) for v in value)
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return value


def write_csv(report: PerfReport, path: PathLike) -> Path:
    """Write the per-op table as CSV (columns :data:`OP_COLUMNS`; shapes written ``RxC``, grid_loc ``r,c``)."""
    path = Path(path)
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(OP_COLUMNS)
        for row in report.ops:
            writer.writerow([_cell(getattr(row, col), col) for col in OP_COLUMNS])
    return path


def write_json(report: PerfReport, path: PathLike) -> Path:
    """Write the whole report as JSON (:meth:`PerfReport.to_dict`)."""
    path = Path(path)
    path.write_text(json.dumps(report.to_dict(), indent=1, sort_keys=False), encoding="utf-8")
    return path


def write_html(report: PerfReport, path: PathLike, title: str = "pybuda performance report",
               routes: Any = None) -> Path:
    """Write the self-contained HTML report (with route drawings when ``routes`` is given, see
    :func:`to_html`)."""
    path = Path(path)
    path.write_text(to_html(report, title, routes=routes), encoding="utf-8")
    return path


def write_reports(report: PerfReport, out_dir: PathLike, basename: str = "perf_report",
                  routes: Any = None) -> Dict[str, Path]:
    """Write ``<basename>.csv``, ``.json`` and ``.html`` into ``out_dir`` (created if needed).

    ``basename`` may come from a model or graph name, so it is made one file-name component and the
    files are checked to lie inside ``out_dir``. Returns ``{"csv": path, "json": path, "html": path}``."""
    from pybuda.paths import path_inside, safe_file_name

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    base = safe_file_name(basename)
    return {
        "csv": write_csv(report, path_inside(out, f"{base}.csv")),
        "json": write_json(report, path_inside(out, f"{base}.json")),
        "html": write_html(report, path_inside(out, f"{base}.html"), routes=routes),
    }


# --------------------------------------------------------------------------------------------------
# HTML
# --------------------------------------------------------------------------------------------------

def _colour(name: str) -> str:
    """A stable, readable colour per op name (hue from a hash, fixed saturation/lightness)."""
    h = int(hashlib.sha1(name.encode("utf-8")).hexdigest()[:6], 16)
    return f"hsl({h % 360}, {55 + (h >> 9) % 25}%, {62 + (h >> 17) % 14}%)"


def _op_title(row: OpPerf) -> str:
    loc = "-" if row.grid_loc is None else f"[{row.grid_loc[0]},{row.grid_loc[1]}]"
    lines = [
        f"{row.name} ({row.type})",
        f"grid {row.grid_size[0]}x{row.grid_size[1]} at {loc}{' transposed' if row.grid_transpose else ''}",
        f"t {row.t}, mblock {row.mblock[0]}x{row.mblock[1]}, ublock {row.ublock[0]}x{row.ublock[1]}, "
        f"m_k {row.m_k}, u_kt {row.u_kt}",
        f"{row.math_fidelity}, out {row.out_df}",
        f"cycles/input {row.cycles:,} ({row.bound}-bound): kernel {row.kernel_cycles:,}, noc {row.noc_cycles:,}, "
        f"dram {row.dram_cycles:,}, pcie {row.pcie_cycles:,}, eth {row.eth_cycles:,}",
        f"busy {row.core_utilization:.0%} of the epoch interval"
        + (f", math utilisation {row.math_utilization:.0%}" if row.ideal_math_cycles else ""),
    ]
    return "\n".join(lines)


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.2em 2em;color:#222;background:#fafafa}
h1{font-size:1.4em;margin-bottom:.2em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ddd}
h3{font-size:1em;margin:.8em 0 .3em}
.summary td{padding:2px 12px 2px 0}.summary td:first-child{color:#666}
.bars{margin:.5em 0}.bar-row{display:flex;align-items:center;margin:3px 0;font-size:.85em}
.bar-label{width:9em;flex:none}.bar{display:flex;height:16px;background:#eee;flex:1;max-width:900px}
.seg{height:100%}.seg.switch{background:#d9534f}.seg.fill{background:#f0ad4e}.seg.steady{background:#5b8bd9}
.bar-val{margin-left:8px;color:#555;white-space:nowrap}
.legend span{display:inline-block;margin-right:12px;font-size:.8em}
.legend i{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
.epoch{margin-bottom:1.2em}.chips{display:flex;flex-wrap:wrap;gap:24px}
.grid{display:grid;gap:2px;background:#ccc;padding:2px;width:max-content}
.core{width:30px;height:30px;background:#fff;font-size:9px;line-height:30px;text-align:center;overflow:hidden;
cursor:default;color:#222}
.core.used{outline:0}.core.hl{outline:2px solid #000;z-index:1}.core.bneck{font-weight:bold}
.oplist{font-size:.8em;margin-top:.4em}.oplist span{display:inline-block;margin:1px 8px 1px 0;padding:0 4px}
table.ops{border-collapse:collapse;font-size:.8em;margin-top:.5em}
table.ops th,table.ops td{border:1px solid #ddd;padding:2px 6px;text-align:right;white-space:nowrap}
table.ops th{background:#eee;cursor:pointer;position:sticky;top:0}
table.ops td.l{text-align:left}tr.bneck td{background:#fff3cd}
.note{color:#666;font-size:.85em}
"""

_JS = """
(function(){
  function cells(op){return document.querySelectorAll('.core[data-op="'+op+'"]');}
  document.querySelectorAll('.core[data-op]').forEach(function(c){
    c.addEventListener('mouseenter',function(){cells(c.dataset.op).forEach(function(x){x.classList.add('hl');});});
    c.addEventListener('mouseleave',function(){cells(c.dataset.op).forEach(function(x){x.classList.remove('hl');});});
  });
  var table=document.getElementById('op-table');
  if(table){
    var heads=table.querySelectorAll('th');
    heads.forEach(function(th,idx){
      th.addEventListener('click',function(){
        var body=table.tBodies[0];var rows=Array.prototype.slice.call(body.rows);
        var asc=th.dataset.dir!=='asc';th.dataset.dir=asc?'asc':'desc';
        rows.sort(function(a,b){
          var x=a.cells[idx].dataset.v||a.cells[idx].textContent,y=b.cells[idx].dataset.v||b.cells[idx].textContent;
          var nx=parseFloat(x),ny=parseFloat(y);
          var r=(!isNaN(nx)&&!isNaN(ny))?nx-ny:(x<y?-1:x>y?1:0);return asc?r:-r;});
        rows.forEach(function(r){body.appendChild(r);});
      });
    });
  }
  document.body.dataset.ready='1';
})();
"""


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _summary_html(report: PerfReport) -> str:
    bneck = report.bottleneck
    rows = [
        ("device", f"{report.device} ({report.arch}), {report.chips} chip(s) × {report.cores_per_chip} cores, "
                   f"{report.clock_hz / 1e9:.2f} GHz"),
        ("microbatch", f"{report.microbatch} (program '{report.program}')"),
        ("throughput", f"{report.samples_per_sec:,.1f} samples/s"),
        ("latency", f"{report.latency_s * 1e3:.3f} ms per microbatch"),
        ("cycles / microbatch", f"{report.cycles_per_microbatch:,} (device {report.device_cycles_per_microbatch:,}, "
                                f"host in {report.host_input_cycles_per_microbatch:,}, "
                                f"host out {report.host_output_cycles_per_microbatch:,}, "
                                f"host binaries {report.host_binary_cycles_per_microbatch:,}, "
                                f"{'overlapped' if report.host_overlapped else 'serial'})"),
        ("limited by", report.limited_by),
        ("epochs", str(report.num_epochs)),
        ("math utilisation", f"{report.math_utilization:.1%} ({report.tflops:.2f} TFLOP/s)"),
        ("core utilisation", f"{report.core_utilization:.1%}"),
        ("bottleneck", f"{bneck.name} ({bneck.bound}, epoch {bneck.epoch})" if bneck else "-"),
    ]
    body = "".join(f"<tr><td>{_esc(k)}</td><td>{_esc(v)}</td></tr>" for k, v in rows)
    return f'<table class="summary" id="summary">{body}</table>'


def _bars_html(report: PerfReport) -> str:
    longest = max((e.total_cycles for e in report.epochs), default=1) or 1
    out = ['<div class="bars" id="epoch-bars">']
    for e in report.epochs:
        steady = max(0, e.total_cycles - e.switch_cycles - e.fill_cycles)
        segs = []
        for cls, val in (("switch", e.switch_cycles), ("fill", e.fill_cycles), ("steady", steady)):
            pct = 100.0 * val / longest
            segs.append(f'<div class="seg {cls}" style="width:{pct:.3f}%" title="{cls}: {val:,} cycles"></div>')
        title = _esc(f"epoch {e.index}: bottleneck {e.bottleneck_op} ({e.bottleneck_bound}), "
                     f"steady {e.steady_cycles:,} cycles/input x {e.input_count}")
        out.append(f'<div class="bar-row epoch-bar" data-epoch="{e.index}" title="{title}">'
                   f'<span class="bar-label">epoch {e.index}</span><div class="bar">{"".join(segs)}</div>'
                   f'<span class="bar-val">{e.total_cycles:,} cycles · {_esc(e.bottleneck_op or e.bottleneck_bound)}'
                   f'</span></div>')
    out.append('<div class="legend"><span><i style="background:#d9534f"></i>epoch switch</span>'
               '<span><i style="background:#f0ad4e"></i>pipeline fill</span>'
               '<span><i style="background:#5b8bd9"></i>steady state</span></div></div>')
    return "".join(out)


def _grid_html(report: PerfReport, rows_by_epoch: Dict[int, List[OpPerf]], grid: Sequence[int]) -> str:
    n_rows, n_cols = int(grid[0]), int(grid[1])
    out = []
    for e in report.epochs:
        ops = rows_by_epoch.get(e.index, [])
        out.append(f'<div class="epoch" id="epoch-{e.index}"><h3>Epoch {e.index} — {_esc(", ".join(e.graphs))}: '
                   f'{e.cores_used}/{e.cores_available} cores, core utilisation {e.core_utilization:.0%}, '
                   f'bottleneck {_esc(e.bottleneck_op or e.bottleneck_bound)}</h3><div class="chips">')
        for chip in e.chips:
            owner: Dict[tuple, OpPerf] = {}
            for row in ops:
                if row.chip != chip:
                    continue
                for rc in row.core_list():
                    owner[rc] = row
            cells = []
            for r in range(n_rows):
                for c in range(n_cols):
                    row = owner.get((r, c))
                    if row is None:
                        cells.append(f'<div class="core" title="core [{r},{c}] idle"></div>')
                        continue
                    cls = "core used bneck" if row.bottleneck else "core used"
                    short = _esc(row.type[:4])
                    cells.append(f'<div class="{cls}" data-op="{_esc(row.name)}" style="background:{_colour(row.name)}" '
                                 f'title="{_esc(_op_title(row))}">{short}</div>')
            out.append(f'<div><div class="note">chip {chip}</div><div class="grid" data-chip="{chip}" '
                       f'style="grid-template-columns:repeat({n_cols},30px)">{"".join(cells)}</div></div>')
        legend = "".join(f'<span style="background:{_colour(r.name)}" title="{_esc(_op_title(r))}">'
                         f'{_esc(r.name)}: {r.cycles:,}</span>' for r in ops)
        out.append(f'</div><div class="oplist">{legend}</div></div>')
    return "".join(out)


def _op_table_html(report: PerfReport) -> str:
    cols = ("epoch", "chip", "name", "type", "grid_loc", "grid_size", "t", "mblock", "ublock", "m_k", "u_kt",
            "math_fidelity", "out_df", "kernel_cycles", "noc_cycles", "dram_cycles", "pcie_cycles", "eth_cycles",
            "cycles", "bound", "math_utilization", "core_utilization")
    text_cols = {"name", "type", "math_fidelity", "out_df", "bound", "grid_loc", "grid_size", "mblock", "ublock"}
    head = "".join(f"<th>{_esc(c)}</th>" for c in cols)
    body = []
    for row in report.ops:
        tds = []
        for c in cols:
            v = getattr(row, c)
            if c.endswith("utilization"):
                tds.append(f'<td data-v="{v:.6f}">{v:.0%}</td>')
            elif isinstance(v, int) and not isinstance(v, bool) and c.endswith("cycles"):
                tds.append(f'<td data-v="{v}">{v:,}</td>')
            elif c in text_cols:
                tds.append(f'<td class="l">{_esc(_cell(v, c))}</td>')
            else:
                tds.append(f"<td>{_esc(_cell(v))}</td>")
        body.append(f'<tr class="{"bneck" if row.bottleneck else ""}">{"".join(tds)}</tr>')
    return f'<table class="ops" id="op-table"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _routes_by_epoch(routes: Any) -> Dict[int, Sequence[Any]]:
    """``routes`` as {epoch index: pipes}: a mapping already, or a backend build (``.epochs``)."""
    if routes is None:
        return {}
    if isinstance(routes, Mapping):
        return {int(k): list(v) for k, v in routes.items()}
    return {int(e.index): list(e.pipes) for e in getattr(routes, "epochs", ())}


#: Stroke colour of a pipe by kind.
_PIPE_COLOURS = {"op": "#3366cc", "dram_read": "#2e9c4a", "host_read": "#8a5fbf", "dram_write": "#d9822b",
                 "host_write": "#b04a9c", "ethernet": "#cc3333"}


def routes_svg(pipes: Sequence[Any], noc_grid: Optional[Tuple[int, int]] = None, chip: int = 0) -> str:
    """An SVG of one chip's NoC for one epoch: worker cores the pipes touch (coloured by op), DRAM/host
    endpoints at their NoC coordinates, and each pipe's routes as polylines along their hops (colour by
    kind: op→op blue, DRAM read green, DRAM write orange, host purple, Ethernet red). ``pipes`` are
    :class:`pybuda.backend_build.routing.Pipe` (read by attribute only); ``noc_grid`` (x, y) defaults to
    the extent of the coordinates drawn."""
    cell, pad = 28, 14
    mine = [p for p in pipes if any(e.chip == chip for e in p.destinations)]
    points = [xy for p in mine for r in p.routes for xy in r]
    points += [e.noc for p in mine for e in (*p.sources, *p.destinations) if e.noc is not None and e.chip == chip]
    gx = max([noc_grid[0] if noc_grid else 0] + [x + 1 for x, _ in points])
    gy = max([noc_grid[1] if noc_grid else 0] + [y + 1 for _, y in points])

    def at(xy: Sequence[int]) -> Tuple[float, float]:
        return pad + xy[0] * cell + cell / 2, pad + xy[1] * cell + cell / 2
    out = [f'<svg class="routes" data-chip="{chip}" '
           f'width="{2 * pad + gx * cell}" height="{2 * pad + gy * cell}">']
    for x in range(gx):
        for y in range(gy):
            out.append(f'<rect x="{pad + x * cell + 1}" y="{pad + y * cell + 1}" width="{cell - 2}" '
                       f'height="{cell - 2}" fill="#f4f4f4" stroke="#ddd"><title>{x}-{y}</title></rect>')
    seen = set()
    for p in mine:
        for e in (*p.sources, *p.destinations):
            if e.noc is None or e.chip != chip or (e.kind, e.name, tuple(e.noc)) in seen:
                continue
            seen.add((e.kind, e.name, tuple(e.noc)))
            x, y = pad + e.noc[0] * cell + 2, pad + e.noc[1] * cell + 2
            fill = _colour(e.name) if e.kind == "core" else ("#9fd4a8" if e.kind == "dram" else "#d6c2ea")
            label = f"{e.kind} {e.name} at {e.noc[0]}-{e.noc[1]}"
            if e.channel is not None:
                label += f", channel {e.channel}"
            out.append(f'<rect class="end {_esc(e.kind)}" x="{x}" y="{y}" width="{cell - 4}" height="{cell - 4}" '
                       f'fill="{fill}"><title>{_esc(label)}</title></rect>')
    for p in mine:
        colour = _PIPE_COLOURS.get(p.kind, "#555")
        for route in p.routes:
            if len(route) < 2:
                continue
            pts = " ".join(f"{a:.1f},{b:.1f}" for a, b in (at(xy) for xy in route))
            out.append(f'<polyline class="pipe" data-kind="{_esc(p.kind)}" points="{pts}" fill="none" '
                       f'stroke="{colour}" stroke-width="1.5" stroke-opacity="0.6"><title>{_esc(p.id)}: '
                       f'{_esc(p.producer)} → {_esc(p.consumer)}, {p.bytes_per_input:,} B/input</title></polyline>')
    out.append("</svg>")
    return "".join(out)


def _routes_html(report: PerfReport, routes: Any) -> str:
    by_epoch = _routes_by_epoch(routes)
    if not by_epoch:
        return ""
    out = ['<h2>Routes per epoch</h2><p class="note">NoC coordinates; each line is a pipe along its hops '
           '(blue op→op, green DRAM read, orange DRAM write, purple host, red Ethernet).</p>']
    for e in report.epochs:
        pipes = by_epoch.get(e.index)
        if not pipes:
            continue
        svgs = "".join(f'<div><div class="note">chip {chip}</div>{routes_svg(pipes, chip=chip)}</div>'
                       for chip in e.chips)
        out.append(f'<div class="epoch-routes" id="routes-{e.index}"><h3>Epoch {e.index}</h3>'
                   f'<div class="chips">{svgs}</div></div>')
    return "".join(out)


def to_html(report: PerfReport, title: str = "pybuda performance report", routes: Any = None) -> str:
    """The HTML report as a string (self-contained: no external URLs, scripts or fonts). ``routes``
    (optional): the backend build's pipes per epoch — ``{epoch index: [Pipe, ...]}`` or a
    :class:`~pybuda.backend_build.build.BackendBuild` — adds an SVG of each epoch's routes."""
    rows_by_epoch: Dict[int, List[OpPerf]] = {}
    for row in report.ops:
        rows_by_epoch.setdefault(row.epoch, []).append(row)
    max_r = max((rc[0] + 1 for row in report.ops for rc in row.core_list()), default=1)
    max_c = max((rc[1] + 1 for row in report.ops for rc in row.core_list()), default=1)
    grid = _grid_shape(report, max_r, max_c)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{_esc(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{_esc(title)}</h1>"
        f"{_summary_html(report)}"
        "<h2>Cycles per epoch (one microbatch)</h2>"
        f"{_bars_html(report)}"
        "<h2>Placement per epoch</h2><p class=\"note\">Each square is a worker core, coloured by op; "
        "hover for the op's model and cycles per input. Bold: the epoch's bottleneck.</p>"
        f"{_grid_html(report, rows_by_epoch, grid)}"
        f"{_routes_html(report, routes)}"
        "<h2>Ops</h2><p class=\"note\">Cycles per core per input; click a header to sort.</p>"
        f"{_op_table_html(report)}"
        f"<script>{_JS}</script></body></html>\n"
    )


def _grid_shape(report: PerfReport, max_r: int, max_c: int) -> Sequence[int]:
    """The worker grid to draw: the device's, grown if an op sits outside it (never hides an op)."""
    return (max(max_r, report.grid_size[0]), max(max_c, report.grid_size[1]))
