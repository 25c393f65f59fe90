"""Compile artifacts in the build directory (TT-Buda's ttbuda_spec §7).

``<build>`` is ``config.backend_output_dir`` when set, else :func:`pybuda.config.build_dir`
(``$PYBUDA_BUILD_DIR`` or ``./tt_build``). Written files:

- ``<build>/<graph>_netlist.yaml``: the netlist;
- ``<build>/<graph>_host_io.json``: its host-I/O record (:class:`pybuda.netlist.host_io.HostIO`: queues of
  the inputs, outputs, parameters and constants, host TMs, tile padding, microbatch);
- ``<build>/compile_and_runtime_config.json``: the config snapshot, the device, the microbatch, the host TMs
  of inputs/outputs and the per-stage timings;
- ``<build>/placement_reports/<graph>_placement.json`` and ``.txt``: per epoch the chip, the ops with their
  type, grid location, grid size and cores, and the cores used (a text table for people).
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List

from pybuda.config import build_dir
from pybuda.passes.context import CompileContext
from pybuda.paths import path_inside, safe_file_name


def output_dir(ctx: CompileContext) -> str:
    """The build directory this compile writes to (created if missing)."""
    path = ctx.config.backend_output_dir or build_dir()
    os.makedirs(path, exist_ok=True)
    return path


def device_summary(device: Any) -> Dict[str, Any]:
    """The device facts worth keeping next to a netlist."""
    out: Dict[str, Any] = {}
    for key in ("name", "chip_count", "harvesting_mask", "aiclk_hz"):
        if hasattr(device, key):
            out[key] = getattr(device, key)
    arch = getattr(device, "arch", None)
    out["arch"] = getattr(arch, "value", str(arch))
    if hasattr(device, "grid_rows"):
        out["grid_size"] = [device.grid_rows, device.grid_cols]
    return out


def placement_report(results: Any) -> Dict[str, Any]:
    """Epochs, ops per epoch with grid location/size, and cores used, as a JSON-friendly dict."""
    ps = results.placer_solution
    bg = results.lowered_graph
    epochs: List[Dict[str, Any]] = []
    for e in ps.epochs:
        ops = []
        for name in e.ops:
            p = ps.op_placements[name]
            model = results.balancer_solution.op_models.get(name)
            ops.append({"name": name, "type": bg.ops[name].type, "grid_loc": list(p.grid_loc),
                        "grid_size": list(p.grid_size), "transposed": bool(p.transposed),
                        "cores": p.grid_size[0] * p.grid_size[1],
                        "cycles": int(getattr(model, "cycles", 0) or 0)})
        epochs.append({"epoch": e.global_epoch, "temporal_epoch": e.temporal_epoch, "chip_id": e.chip_id,
                       "epoch_type": e.epoch_type, "cores_used": sum(o["cores"] for o in ops), "ops": ops})
    dev = results.device
    total = dev.grid_rows * dev.grid_cols if hasattr(dev, "grid_rows") else None
    return {"graph": bg.name, "device": device_summary(dev), "cores_per_chip": total, "epochs": epochs,
            "epoch_to_epoch_queues": list(ps.epoch_to_epoch_queues)}


def placement_table(report: Dict[str, Any]) -> str:
    """The placement report as a text table."""
    lines = [f"placement of '{report['graph']}' on {report['device'].get('name', report['device'].get('arch'))} "
             f"({report['cores_per_chip']} cores per chip), {len(report['epochs'])} epoch(s)"]
    for e in report["epochs"]:
        lines.append("")
        lines.append(f"epoch {e['epoch']} (chip {e['chip_id']}, {e['epoch_type']}): {len(e['ops'])} ops, "
                     f"{e['cores_used']} cores")
        lines.append(f"  {'op':<48} {'type':<10} {'loc':>8} {'grid':>7} {'cores':>5} {'cycles':>9}")
        for o in e["ops"]:
            loc = f"{o['grid_loc'][0]},{o['grid_loc'][1]}"
            grid = f"{o['grid_size'][0]}x{o['grid_size'][1]}" + ("T" if o["transposed"] else "")
            name = o["name"] if len(o["name"]) <= 48 else o["name"][:45] + "..."
            lines.append(f"  {name:<48} {o['type']:<10} {loc:>8} {grid:>7} {o['cores']:>5} {o['cycles']:>9}")
    return "\n".join(lines) + "\n"


def write_artifacts(results: Any, ctx: CompileContext) -> Dict[str, str]:
    """Write the netlist, its host-I/O record, the config snapshot and the placement report; returns their
    paths by kind."""
    from pybuda.netlist import to_yaml

    root = output_dir(ctx)
    # The graph name comes from the user (module name, saved graph JSON): it is made one harmless file-name
    # component, and every path is checked to stay in the build folder.
    name = safe_file_name(ctx.graph_name)
    paths: Dict[str, str] = {}
    netlist_path = path_inside(root, f"{name}_netlist.yaml")
    with open(netlist_path, "w") as f:
        f.write(to_yaml(results.netlist))
    paths["netlist"] = netlist_path
    if getattr(results, "host_io", None) is not None:
        host_io_path = path_inside(root, f"{name}_host_io.json")
        with open(host_io_path, "w") as f:
            json.dump(results.host_io.to_dict(), f, indent=1)
        paths["host_io"] = host_io_path
    cfg_path = path_inside(root, "compile_and_runtime_config.json")
    snapshot = {"graph": ctx.graph_name, "microbatch": ctx.microbatch, "device": device_summary(ctx.device),
                "compiler_config": ctx.config.to_dict(), "input_host_tms": _jsonable(ctx.input_host_tms),
                "output_host_tms": _jsonable(ctx.output_host_tms),
                "stage_timings": dict(results.stage_timings)}
    with open(cfg_path, "w") as f:
        json.dump(snapshot, f, indent=1, default=str)
    paths["config"] = cfg_path
    report = placement_report(results)
    rep_dir = os.path.join(root, "placement_reports")
    os.makedirs(rep_dir, exist_ok=True)
    json_path = path_inside(root, "placement_reports", f"{name}_placement.json")
    with open(json_path, "w") as f:
        json.dump(report, f, indent=1, default=str)
    txt_path = path_inside(root, "placement_reports", f"{name}_placement.txt")
    with open(txt_path, "w") as f:
        f.write(placement_table(report))
    paths["placement_json"] = json_path
    paths["placement_txt"] = txt_path
    return paths


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    return str(value)
