"""The performance model's estimator: :class:`_Estimator` walks one program of a netlist on a device
and costs every op, shared link (DRAM channels, PCIe, Ethernet), epoch switch and the host's work into a
:class:`~pybuda.perf.types.PerfReport`."""

from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from pybuda.backend_build.routing import Pipe, graph_pipes, input_tile_caps
from pybuda.perf import cost
from pybuda.perf.config import BOUNDS, PerfConfig
from pybuda.perf.fill import SliceTimes, op_fill, slices_needed
from pybuda.perf.pipes import fork_join, gather_sources, pipe_rate, topo
from pybuda.perf.program import (
    _UNIT_MATMUL, _UNIT_MODEL, _chip_of, _CostModel, _CostOp, _Exec, _flatten, _fused_table, _group_temporal,
    _pick_program,
)
from pybuda.perf.types import EpochPerf, OpPerf, PerfReport
from pybuda.errors import ConfigError, NetlistError
from pybuda.netlist.model import NON_TENSIX_OPS, GraphDef, Netlist, NetlistOp, QueueDef
from pybuda.netlist.operands import op_l1_usage

__all__ = ["_Estimator"]


class _Estimator:
    def __init__(self, netlist: Netlist, device: Any, microbatch: Optional[int], config: PerfConfig,
                 program: Optional[str], temporal_epochs: Optional[Mapping[str, int]]):
        self.netlist = netlist
        self.device = device
        self.cfg = config
        self.bw = cost.device_bandwidth(device)
        # NoC endpoints ("subchannels") per DRAM channel: 3 on Wormhole, 1 on Grayskull (NBS §5.1)
        chans = getattr(device, "dram_channels", None) or ()
        self.endpoints_per_channel = min((len(getattr(c, "noc_endpoints", ()) or ()) for c in chans), default=0)
        self.clock = float(device.aiclk_hz)
        self.fused = _fused_table(netlist)
        self.prog = _pick_program(netlist, program)
        self.execs = _flatten(netlist, self.prog)
        if not self.execs:
            raise NetlistError(f"programs.{self.prog.name}", "the program executes no graph")
        self.groups = _group_temporal(self.execs, temporal_epochs)
        base = self._samples_per_iteration()
        self.microbatch = int(microbatch) if microbatch else base
        if self.microbatch < 1:
            raise ConfigError(f"microbatch must be >= 1, got {microbatch}")
        self.scale = self.microbatch / base
        self.pcie_latency = self.cfg.pcie_latency_s * self.clock
        self.eth_latency = self.cfg.eth_latency_s * self.clock
        eth_bps = float(getattr(device, "eth_link_bytes_per_s", 0.0) or 0.0)
        self.eth_rate = eth_bps * max(1, self.cfg.eth_links_per_chip_pair) / self.clock if eth_bps else 0.0
        self.op_rows: Dict[str, OpPerf] = {}
        self.op_graph: Dict[str, GraphDef] = {g_op.name: g for g, g_op in netlist.iter_ops()}
        # The backend build's pipes, per graph: op -> input index (-1: output writes) -> pipes. Every
        # byte the model moves over the NoC, DRAM, PCIe and Ethernet per input is summed from these.
        self._pipes: Dict[str, Dict[str, Dict[int, List[Pipe]]]] = {}

    def pipes_of(self, graph: GraphDef, op: NetlistOp) -> Dict[int, List[Pipe]]:
        """The pipes of ``op`` by input index (-1: its output writes), built once per graph
        (:func:`pybuda.backend_build.routing.graph_pipes`, without routes: only the traffic is needed)."""
        table = self._pipes.get(graph.name)
        if table is None:
            table = {}
            for p in graph_pipes(self.netlist, graph.name, self.device, routes=False, strict=False):
                owner = p.producer if p.operand < 0 else p.consumer
                table.setdefault(owner, {}).setdefault(p.operand, []).append(p)
            self._pipes[graph.name] = table
        return table.get(op.name, {})

    # -- program-level facts ----------------------------------------------------------------------
    def _samples_per_iteration(self) -> int:
        """Inputs one program iteration consumes: the input_count of the first graph that reads a
        host-fed queue (else of the first execute)."""
        for ex in self.execs:
            for op in ex.graph.ops.values():
                for name in op.inputs:
                    q = self.netlist.queues.get(name)
                    if q is not None and self._is_host_stream(ex, q):
                        return max(1, ex.graph.input_count)
        return max(1, self.execs[0].graph.input_count)

    def _input_count(self, graph: GraphDef) -> int:
        return max(1, int(round(graph.input_count * self.scale)))

    def _is_host_stream(self, ex: _Exec, q: QueueDef) -> bool:
        """True for a queue the host fills with new entries every microbatch: host-fed, a FIFO
        (``type: queue``; parameters and constants are ``ram``, written once) and not loaded as a
        prologue."""
        return q.is_host_fed and q.type == "queue" and not self._is_prologue(ex, q.name)

    @staticmethod
    def _is_prologue(ex: _Exec, queue: str) -> bool:
        s = ex.execute.queue_settings.get(queue)
        return bool(s is not None and s.prologue is True)

    # -- per op ----------------------------------------------------------------------------------
    def _sources(self, ex: _Exec, op: NetlistOp) -> List[str]:
        out = []
        for name in op.inputs:
            q = self.netlist.queues.get(name)
            if q is None:
                out.append("op")
            elif self._is_prologue(ex, name):
                out.append("prologue")
            else:
                out.append("host" if q.loc == "host" else "dram")
        return out

    def _output_dest(self, op: NetlistOp) -> str:
        dests = [q.loc for q in self.netlist.queues_fed_by(op.name)]
        if "host" in dests:
            return "host"
        if "dram" in dests:
            return "dram"
        return "op"

    def _op_bounds(self, ex: _Exec, op: NetlistOp) -> Dict[str, Any]:
        """Kernel and the op's own bounds (cost.py), plus its DRAM/host/ethernet bytes for the shared
        links of the epoch."""
        cop, cmod = _CostOp(op), _CostModel(op)
        sources = self._sources(ex, op)
        n = len(op.inputs)
        caps_t = input_tile_caps(self.netlist, op)
        pipes = self.pipes_of(ex.graph, op)

        def breakdown(srcs: Sequence[str], dest: str) -> cost.CycleBreakdown:
            ctx = cost.BandwidthContext(tuple(srcs), dest, caps_t)
            return cost.op_cycle_breakdown(cop, cmod, self.device, ctx, fused_ops=self.fused, bandwidth=self.bw)

        quiet = ["prologue"] * n
        base = breakdown(quiet, "op")
        kernel, ideal = base.kernel, None
        bounds = {"kernel": kernel, "noc": base.output_bw, "dram": 0, "pcie": 0, "eth": 0}
        label = {"op": "noc", "dram": "dram", "host": "pcie"}
        for kind in sorted(set(sources) - {"prologue"}):
            br = breakdown([s if s == kind else "prologue" for s in sources], "op")
            key = label[kind]
            bounds[key] = max(bounds[key], br.input_bw)
        # Op→op pipes at their direct/gather rates (NBS §6.3) instead of cost.py's flat NoC rate: each
        # core's slice of an input over the slowest (most-gathering) pipe that carries it.
        noc_in = 0.0
        for i in range(len(op.inputs)):
            if sources[i] != "op":
                continue
            noc_in += max((p.bytes_per_input / self._pipe_rate(p.source_count) for p in pipes.get(i, ())),
                          default=0.0)
        out_noc = cost.output_tiles_per_core(cmod) * cost.tile_size_bytes(op.out_df) / self._pipe_rate(1)
        if self.cfg.gather_pipes:
            bounds["noc"] = int(math.ceil(max(noc_in, out_noc)))
        dest = self._output_dest(op)
        if dest != "op":
            bounds[label[dest]] = max(bounds[label[dest]], breakdown(quiet, dest).output_bw)

        # Bytes per input moved over shared links: the sum over the pipes (one per distinct fetch).
        cores = max(1, op.grid_size[0] * op.grid_size[1])
        operands = len(cost.input_tiles_per_core(cop, cmod))  # inputs the cost model gives a slice
        dram_bytes: Dict[Tuple[int, int], float] = {}
        # the same bytes per DRAM NoC endpoint: (chip, channel, port, "r" read / "w" write)
        endpoint_bytes: Dict[Tuple[int, int, int, str], float] = {}
        host_bytes = 0.0
        eth_bytes: Dict[Tuple[int, int], float] = {}
        chip = _chip_of(ex.graph.target_device)

        def cross(other: int, nbytes: float) -> None:
            # traffic between two chips shares the Ethernet links of that pair
            if other != chip:
                pair = (min(chip, other), max(chip, other))
                eth_bytes[pair] = eth_bytes.get(pair, 0.0) + nbytes
        for i, name in enumerate(op.inputs):
            q = self.netlist.queues.get(name)
            if i >= operands:
                break
            nbytes = sum(p.bytes_per_input for p in pipes.get(i, ()))
            if q is None:
                producer_graph = self.op_graph.get(name)
                if producer_graph is not None:
                    cross(_chip_of(producer_graph.target_device), nbytes)  # queueless multichip
                continue
            if sources[i] == "prologue":
                continue
            if q.loc == "host":
                host_bytes += nbytes
            else:
                self._spread(dram_bytes, q, nbytes)
                self._spread_endpoints(endpoint_bytes, q, nbytes, "r")
                cross(_chip_of(q.target_device), nbytes)
        writes: Dict[str, float] = {}
        for p in pipes.get(-1, ()):
            writes[p.consumer] = writes.get(p.consumer, 0) + p.bytes_per_input
        for q in self.netlist.queues_fed_by(op.name):
            out_bytes = writes.get(q.name, 0)
            if q.loc == "host":
                host_bytes += out_bytes
            else:
                self._spread(dram_bytes, q, out_bytes)
                self._spread_endpoints(endpoint_bytes, q, out_bytes, "w")
                cross(_chip_of(q.target_device), out_bytes)
        if op.type == "ethernet_datacopy" and op.attr("dest_device") is not None:
            # an Ethernet copy to another chip's op has no queue to write: its whole output crosses
            out_bytes = cost.output_tiles_per_core(cmod) * cost.tile_size_bytes(op.out_df) * cores
            cross(int(op.attr("dest_device")), out_bytes)
        if ideal is None:
            ideal = cost.matmul_ideal_cycles(cop, cmod, self.device)
        return {"bounds": bounds, "dram_bytes": dram_bytes, "endpoint_bytes": endpoint_bytes,
                "host_bytes": host_bytes, "eth_bytes": eth_bytes,
                "ideal": ideal, "sources": sources}

    def _pipe_rate(self, sources: int) -> float:
        """Bytes per cycle of an op→op pipe into one consumer core fed by ``sources`` producer cores
        (:func:`~pybuda.perf.pipes.pipe_rate`)."""
        return pipe_rate(self.cfg, self.clock, sources)

    def _gather_sources(self, op: NetlistOp, index: int) -> int:
        """Producer cores one core of ``op`` gathers input ``index`` from: the most sources of any of
        the input's pipes (:func:`~pybuda.perf.pipes.gather_sources`)."""
        graph = self.op_graph.get(op.name)
        return gather_sources(self.pipes_of(graph, op).get(index, ()) if graph is not None else ())

    def _spread_endpoints(self, acc: Dict[Tuple[int, int, int, str], float], q: QueueDef, nbytes: float,
                          kind: str) -> None:
        """Add ``nbytes`` to the DRAM NoC endpoints of the queue's buffers, evenly, as :meth:`_spread` does
        to their channels (see :meth:`_endpoint_cycles`). A buffer is read through the endpoint its
        ``read_ports`` entry names and written through its ``write_ports`` entry (NBS §1.2: one per buffer,
        "picks the DRAM sub-channel NoC endpoint"), whichever core reads it; a queue without them has its
        buffers on one channel take that channel's endpoints in turn [D] (PyBuda's balancer spread DRAM
        readers over channels·subchannels, NBS §5.4). Only channels with several endpoints (Wormhole:
        3 per channel, NBS §5.1) are counted: on a single-endpoint channel the channel's own rate is all."""
        allocs = q.dram or ()
        ports = self.endpoints_per_channel
        if not allocs or ports <= 1:
            return
        given = q.read_ports if kind == "r" else q.write_ports
        chip = _chip_of(q.target_device)
        share = nbytes / len(allocs)
        turn: Dict[int, int] = {}
        for i, (channel, _addr) in enumerate(allocs):
            channel = int(channel)
            if given and i < len(given):
                port = int(given[i]) % ports
            else:
                port = turn.get(channel, 0) % ports
                turn[channel] = turn.get(channel, 0) + 1
            key = (chip, channel, port, kind)
            acc[key] = acc.get(key, 0.0) + share

    def _endpoint_cycles(self, key: Tuple[int, int, int, str], nbytes: float) -> float:
        """Cycles per input one DRAM NoC endpoint needs for its reads (``kind`` "r") or writes ("w").

        A queue buffer is reached through one NoC endpoint of its channel, and an endpoint injects read data
        into the NoC and absorbs write data at tt-npe's DRAM endpoint rates (NBS §6.3:
        ``dram_read_endpoint_bytes_per_cycle``, ``dram_write_endpoint_bytes_per_cycle``), below a Wormhole
        channel's controller rate: a channel whose traffic goes through one endpoint cannot reach its
        controller's bandwidth (NBS §5.4: PyBuda's balancer saw at most 20.4 B/cycle from a WH DRAM reader)."""
        rate = (self.cfg.dram_read_endpoint_bytes_per_cycle if key[3] == "r"
                else self.cfg.dram_write_endpoint_bytes_per_cycle)
        return nbytes / min(rate, self.bw.dram_per_channel)

    @staticmethod
    def _spread(acc: Dict[Tuple[int, int], float], q: QueueDef, nbytes: float) -> None:
        """Add ``nbytes`` to the (chip, channel) of each of the queue's buffers, evenly."""
        allocs = q.dram or ()
        chip = _chip_of(q.target_device)
        if not allocs:
            acc[(chip, -1)] = acc.get((chip, -1), 0.0) + nbytes
            return
        share = nbytes / len(allocs)
        for channel, _addr in allocs:
            key = (chip, int(channel))
            acc[key] = acc.get(key, 0.0) + share

    # -- one temporal epoch -------------------------------------------------------------------------
    def _epoch(self, index: int, group: List[_Exec], prev_graph_on_chip: Dict[int, str],
               cache_overflow: Dict[int, bool]) -> EpochPerf:
        rows: Dict[str, OpPerf] = {}
        info: Dict[str, Dict[str, Any]] = {}
        channel_bytes: Dict[Tuple[int, int], float] = {}
        endpoint_bytes: Dict[Tuple[int, int, int, str], float] = {}
        host_bytes_total = 0.0
        eth_bytes_pair: Dict[Tuple[int, int], float] = {}
        for ex in group:
            for op in ex.graph.ops.values():
                b = self._op_bounds(ex, op)
                info[op.name] = {"ex": ex, "op": op, **b}
                for key, nbytes in b["dram_bytes"].items():
                    channel_bytes[key] = channel_bytes.get(key, 0.0) + nbytes
                for key, nbytes in b["endpoint_bytes"].items():
                    endpoint_bytes[key] = endpoint_bytes.get(key, 0.0) + nbytes
                host_bytes_total += b["host_bytes"]
                for pair, nbytes in b["eth_bytes"].items():
                    eth_bytes_pair[pair] = eth_bytes_pair.get(pair, 0.0) + nbytes

        # Shared links: cycles per input each must spend.
        channel_cycles = {key: nbytes / (self.bw.dram_total if key[1] < 0 else self.bw.dram_per_channel)
                          for key, nbytes in channel_bytes.items()}
        endpoint_cycles = {key: self._endpoint_cycles(key, nbytes) for key, nbytes in endpoint_bytes.items()}
        pcie_cycles = host_bytes_total / self.bw.pcie if host_bytes_total else 0.0
        eth_cycles = {pair: (nbytes / self.eth_rate if self.eth_rate else 0.0)
                      for pair, nbytes in eth_bytes_pair.items()}

        steady = 0
        bottleneck: Optional[str] = None
        for name, d in info.items():
            op: NetlistOp = d["op"]
            ex: _Exec = d["ex"]
            bounds = dict(d["bounds"])
            touched = [channel_cycles[k] for k in d["dram_bytes"]] + [endpoint_cycles[k] for k in d["endpoint_bytes"]]
            if touched:
                bounds["dram"] = max(bounds["dram"], int(math.ceil(max(touched))))
            if d["host_bytes"]:
                bounds["pcie"] = max(bounds["pcie"], int(math.ceil(pcie_cycles)))
            if d["eth_bytes"]:
                bounds["eth"] = max(bounds["eth"], int(math.ceil(max(eth_cycles[p] for p in d["eth_bytes"]))))
            cycles = max(bounds.values())
            bound = next(k for k in BOUNDS if bounds[k] == cycles)
            cores = 0 if op.type in NON_TENSIX_OPS else op.grid_size[0] * op.grid_size[1]
            ideal = d["ideal"]
            arch = self.device
            # FLOPs follow the ideal cycles: one 32x32x32 tile product per ideal-tile-cycles × F
            flops = 0.0
            if ideal:
                tile_macs = ideal / (cost.matmul_ideal_cycles(_UNIT_MATMUL, _UNIT_MODEL, arch) *
                                     op.math_fidelity.phases)
                flops = 2.0 * 32 ** 3 * tile_macs * max(1, cores)
            row = OpPerf(
                name=op.name, type=op.type, op_class=op.op_class, graph=ex.graph.name, epoch=index,
                chip=_chip_of(ex.graph.target_device), grid_loc=op.grid_loc, grid_size=op.grid_size,
                grid_transpose=op.grid_transpose, cores=cores, t=op.t, mblock=op.mblock, ublock=op.ublock,
                m_k=op.m_k, u_kt=op.u_kt, math_fidelity=op.math_fidelity.name, out_df=op.out_df.name,
                kernel_cycles=int(bounds["kernel"]), noc_cycles=int(bounds["noc"]), dram_cycles=int(bounds["dram"]),
                pcie_cycles=int(bounds["pcie"]), eth_cycles=int(bounds["eth"]), cycles=int(cycles), bound=bound,
                ideal_math_cycles=int(ideal), flops_per_input=flops,
                math_utilization=(ideal / cycles) if (ideal and cycles) else 0.0)
            rows[name] = row
            if cycles > steady:
                steady, bottleneck = int(cycles), name
        # A shared link busier than every op bounds the epoch by itself (e.g. PCIe for host queues).
        link_bound = "kernel"
        dram_link = max(max(channel_cycles.values(), default=0.0), max(endpoint_cycles.values(), default=0.0))
        for label, cyc in (("dram", dram_link), ("pcie", pcie_cycles),
                           ("eth", max(eth_cycles.values(), default=0.0))):
            if cyc > steady:
                steady, link_bound, bottleneck = int(math.ceil(cyc)), label, None
        # Fork/join: a join whose short input path cannot buffer the long path's mblocks in flight
        # stalls the fork (and with it the whole pipeline) — NBS §6.4.
        fj_cycles, fj_fork, fj_join = self._fork_join(info, rows) if self.cfg.fork_join_stalls else (0.0, None, None)
        if fj_cycles > steady:
            steady, bottleneck, link_bound = int(math.ceil(fj_cycles)), fj_fork, "fork_join"
            if fj_fork is not None:
                rows[fj_fork].fork_join_cycles = int(math.ceil(fj_cycles))
                rows[fj_fork].fork_join_with = fj_join
        steady = max(steady, 1)
        for row in rows.values():
            row.core_utilization = min(1.0, row.cycles / steady)
        if bottleneck is not None:
            rows[bottleneck].bottleneck = True
            bneck_bound = "fork_join" if link_bound == "fork_join" else rows[bottleneck].bound
        else:
            bneck_bound = link_bound

        fill = self._fill(info, rows)
        fill = max(fill, steady)
        input_count = max(self._input_count(ex.graph) for ex in group)
        run_cycles = fill + (input_count - 1) * steady

        # Epoch switch: per chip, concurrently; nothing to reload if the chip just ran this graph.
        switch = 0.0
        breakdown: Dict[str, float] = {"launch": 0.0, "binaries": 0.0, "prologue": 0.0}
        prologue_total = binary_total = host_binary_total = 0
        for ex in group:
            chip = _chip_of(ex.graph.target_device)
            parts, pbytes, bbytes = self._switch_parts(ex, rows)
            if prev_graph_on_chip.get(chip) == ex.graph.name:
                parts = {"launch": float(self.cfg.epoch_launch_cycles), "binaries": 0.0, "prologue": 0.0}
            else:
                prologue_total += pbytes
                binary_total += bbytes
                if cache_overflow.get(chip, False):
                    host_binary_total += bbytes
            prev_graph_on_chip[chip] = ex.graph.name
            chip_total = sum(parts.values())
            if chip_total > switch:
                switch, breakdown = chip_total, parts
        total = int(math.ceil(switch)) + run_cycles

        chips = sorted({_chip_of(ex.graph.target_device) for ex in group})
        cores_available = self.device.cores_per_chip * len(chips)
        cores_used = sum(r.cores for r in rows.values())
        busy = sum(r.cores * r.cycles for r in rows.values())
        ideal_core_cycles = sum(r.ideal_math_cycles * r.cores for r in rows.values())
        for name, row in rows.items():
            self.op_rows[name] = row
        return EpochPerf(
            index=index, graphs=[ex.graph.name for ex in group], chips=chips, input_count=input_count,
            ops=list(rows), steady_cycles=steady, fill_cycles=int(fill),
            switch_cycles=int(math.ceil(switch)), total_cycles=int(total), bottleneck_op=bottleneck,
            bottleneck_bound=bneck_bound, cores_used=cores_used, cores_available=cores_available,
            core_utilization=busy / (cores_available * steady) if cores_available else 0.0,
            math_utilization=(ideal_core_cycles * input_count) / (cores_available * total) if total else 0.0,
            switch_breakdown={k: float(v) for k, v in breakdown.items()},
            dram_channel_cycles={f"{c}:{ch}": int(math.ceil(v)) for (c, ch), v in sorted(channel_cycles.items())},
            dram_endpoint_cycles={f"{c}:{ch}.{port}:{kind}": int(math.ceil(v))
                                  for (c, ch, port, kind), v in sorted(endpoint_cycles.items())},
            pcie_cycles_per_input=int(math.ceil(pcie_cycles)), prologue_bytes=int(prologue_total),
            binary_bytes=int(binary_total), host_binary_bytes=int(host_binary_total))

    def _fork_join(self, info: Dict[str, Dict[str, Any]], rows: Dict[str, OpPerf]
                   ) -> Tuple[float, Optional[str], Optional[str]]:
        """The per-input interval fork/join loops impose, with the fork and join op of the worst one
        (:func:`~pybuda.perf.pipes.fork_join`, NBS §6.4)."""
        return fork_join(info, rows)

    @staticmethod
    def _topo(info: Dict[str, Dict[str, Any]], succ: Dict[str, List[Tuple[str, int]]]) -> List[str]:
        return topo(info, succ)

    def _fill(self, info: Dict[str, Dict[str, Any]], rows: Dict[str, OpPerf]) -> int:
        """Latency of the first input through the epoch's pipeline (:mod:`pybuda.perf.fill`): the latest
        time an op puts out the input's last t-slice. An op's first slice starts once each producer
        has put out the slices it reads (:func:`~pybuda.perf.fill.slices_needed`), plus each edge's
        transport latency (NoC hops, DRAM read, PCIe, Ethernet). An op's ``latency_cycles`` is its
        first slice out."""
        memo: Dict[str, SliceTimes] = {}
        visiting: set = set()

        def hops(a: Optional[Tuple[int, int]], b: Optional[Tuple[int, int]]) -> int:
            if a is None or b is None:
                return 0
            return abs(a[0] - b[0]) + abs(a[1] - b[1])

        def latency(name: str) -> SliceTimes:
            if name in memo:
                return memo[name]
            d = info[name]
            op: NetlistOp = d["op"]
            if name in visiting:  # a cycle cannot happen in a valid netlist; do not recurse forever
                return SliceTimes(0.0, 0.0, 1, 0.0, 0.0)
            visiting.add(name)
            start = span = 0.0
            for i, inp in enumerate(op.inputs):
                src = d["sources"][i] if i < len(d["sources"]) else "op"
                if inp in info:
                    p = info[inp]["op"]
                    edge = self.cfg.noc_latency_base_cycles + self.cfg.noc_latency_per_hop_cycles * hops(
                        p.grid_loc, op.grid_loc)
                    if _chip_of(info[inp]["ex"].graph.target_device) != _chip_of(d["ex"].graph.target_device):
                        edge += self.eth_latency
                    times = latency(inp)
                    n = slices_needed(p.shape, op.input_tms.get(i, ()), op.input_unpad.get(i))
                    start = max(start, times.ready(n) + edge)
                    span = max(span, times.span)
                elif src == "dram":
                    start = max(start, float(self.cfg.dram_latency_cycles))
                elif src == "host":
                    start = max(start, self.pcie_latency)
            visiting.discard(name)
            memo[name] = op_fill(start, span, rows[name].cycles, op.t)
            rows[name].latency_cycles = int(math.ceil(memo[name].first))
            return memo[name]

        return int(math.ceil(max((latency(n).last for n in info), default=0.0)))

    def _switch_parts(self, ex: _Exec, rows: Dict[str, OpPerf]) -> Tuple[Dict[str, float], int, int]:
        """Cycles to load one graph on its chip (launch, binaries, prologue parameters), the prologue
        bytes and the binary bytes."""
        cores = sum(rows[name].cores for name in ex.graph.ops if name in rows)
        bin_bytes = cores * (self.cfg.kernel_binary_bytes_per_core + self.cfg.overlay_blob_bytes_per_core)
        binaries = bin_bytes / self.bw.dram_total
        per_channel: Dict[int, float] = {}
        total = 0
        for op in ex.graph.ops.values():
            prologue_idx = [i for i, name in enumerate(op.inputs) if self._is_prologue(ex, name)]
            if not prologue_idx:
                continue
            usage = op_l1_usage(self.netlist, op, prologue_idx)
            op_cores = max(1, op.grid_size[0] * op.grid_size[1])
            for i in prologue_idx:
                nbytes = usage.buffers.get(f"input_{i}", 0) * op_cores
                total += nbytes
                q = self.netlist.queues[op.inputs[i]]
                allocs = q.dram or ()
                if allocs:
                    for channel, _addr in allocs:
                        per_channel[int(channel)] = per_channel.get(int(channel), 0.0) + nbytes / len(allocs)
                else:
                    per_channel[-1] = per_channel.get(-1, 0.0) + nbytes
        prologue = 0.0
        if total:
            host = per_channel.pop(-1, 0.0)
            chan = max((v / self.bw.dram_per_channel for v in per_channel.values()), default=0.0)
            prologue = max(chan, sum(per_channel.values()) / self.bw.dram_total) + (host / self.bw.pcie if host else 0)
        return {"launch": float(self.cfg.epoch_launch_cycles), "binaries": binaries, "prologue": prologue}, total, \
            int(bin_bytes)

    # -- host transfers -----------------------------------------------------------------------------
    def _host_transfers(self) -> Tuple[float, float, bool]:
        """(input cycles, output cycles, overlapped) of the host's work per microbatch.

        Inputs: the host converts every host-fed streamed queue's entries to tiles
        (``host_tilize_bytes_per_s``) and, for a queue in device DRAM, writes them over PCIe (a queue in
        host memory is read by the device during the epoch, which the epoch's PCIe bound covers).
        Outputs: queues the host reads back (host-memory queues, and DRAM queues no op reads) are
        untilized at the same rate, DRAM ones after a PCIe read. The host works ahead of the device
        only when each input queue holds ``host_overlap_microbatches`` microbatches."""
        tilize = self.cfg.host_tilize_bytes_per_s / self.clock  # bytes per AI-clock cycle
        in_cycles = 0.0
        overlapped = True
        seen: set = set()
        for ex in self.execs:
            n = self._input_count(ex.graph)
            for op in ex.graph.ops.values():
                for name in op.inputs:
                    q = self.netlist.queues.get(name)
                    if q is None or name in seen or not self._is_host_stream(ex, q):
                        continue
                    seen.add(name)
                    nbytes = q.buffers * q.entry_size_bytes() * n
                    in_cycles += nbytes / tilize + (nbytes / self.bw.pcie if q.loc == "dram" else 0.0)
                    if q.entries < self.cfg.host_overlap_microbatches * ex.graph.input_count:
                        overlapped = False
        out_cycles = 0.0
        executed_ops = {name for ex in self.execs for name in ex.graph.ops}
        for q in self.netlist.queues.values():
            if q.is_host_fed or q.input not in executed_ops or self.netlist.readers_of(q.name):
                continue  # not an output of this program, or read on the device (e2e)
            nbytes = q.buffers * q.entry_size_bytes() * self.microbatch
            out_cycles += nbytes / tilize + (nbytes / self.bw.pcie if q.loc == "dram" else 0.0)
        return in_cycles, out_cycles, overlapped

    # -- everything ---------------------------------------------------------------------------------
    def run(self) -> PerfReport:
        prev: Dict[int, str] = {}
        distinct: Dict[int, set] = {}
        for ex in self.execs:
            distinct.setdefault(_chip_of(ex.graph.target_device), set()).add(ex.graph.name)
        overflow = {chip: len(names) > self.cfg.binary_cache_slots for chip, names in distinct.items()}
        # Steady state over microbatches: the chip's previous graph is the last one of the previous
        # iteration, so walk the program once to seed it.
        for group in self.groups:
            for ex in group:
                prev[_chip_of(ex.graph.target_device)] = ex.graph.name
        epochs = [self._epoch(i, group, prev, overflow) for i, group in enumerate(self.groups)]
        device_cycles = sum(e.total_cycles for e in epochs)
        in_cycles, out_cycles, overlapped = self._host_transfers()
        bin_rate = self.cfg.host_binary_write_bytes_per_s / self.clock  # bytes per AI-clock cycle
        bin_cycles = sum(e.host_binary_bytes for e in epochs) / bin_rate
        host = in_cycles + out_cycles + bin_cycles  # one host thread does all of it
        if overlapped:
            cycles = max(device_cycles, host)
        else:
            # inputs and outputs wait for the device; binary pushes still run ahead of it
            cycles = max(device_cycles + in_cycles + out_cycles, host)
        seconds = cycles / self.clock
        first_in = in_cycles / max(1, self.microbatch)  # the first input must arrive before anything runs
        latency = (device_cycles + in_cycles + out_cycles if not overlapped else device_cycles + first_in + out_cycles)
        # binaries beyond the cache are rewritten for the first microbatch too: the device waits for them
        latency = max(latency, bin_cycles + first_in + out_cycles)
        cores_per_chip = self.device.cores_per_chip
        total_core_cycles = sum(e.total_cycles * e.cores_available for e in epochs)
        ideal = sum(r.ideal_math_cycles * r.cores * next(e.input_count for e in epochs if e.index == r.epoch)
                    for r in self.op_rows.values())
        busy = sum(r.cores * r.cycles * next(e.input_count for e in epochs if e.index == r.epoch)
                   for r in self.op_rows.values())
        flops_per_sample = sum(r.flops_per_input * next(e.input_count for e in epochs if e.index == r.epoch)
                               for r in self.op_rows.values()) / self.microbatch
        ops = [self.op_rows[name] for e in epochs for name in e.ops]
        return PerfReport(
            device=str(getattr(self.device, "name", "device")),
            arch=str(getattr(self.device.arch, "value", self.device.arch)), clock_hz=self.clock,
            chips=int(getattr(self.device, "chip_count", 1)), cores_per_chip=cores_per_chip,
            microbatch=self.microbatch, program=self.prog.name, ops=ops, epochs=epochs,
            device_cycles_per_microbatch=int(device_cycles),
            host_input_cycles_per_microbatch=int(math.ceil(in_cycles)),
            host_output_cycles_per_microbatch=int(math.ceil(out_cycles)), host_overlapped=overlapped,
            host_binary_cycles_per_microbatch=int(math.ceil(bin_cycles)),
            cycles_per_microbatch=int(math.ceil(cycles)), seconds_per_microbatch=seconds,
            samples_per_sec=self.microbatch / seconds if seconds > 0 else float("inf"),
            latency_s=latency / self.clock,
            math_utilization=ideal / total_core_cycles if total_core_cycles else 0.0,
            core_utilization=busy / total_core_cycles if total_core_cycles else 0.0,
            flops_per_sample=flops_per_sample,
            grid_size=(int(self.device.grid_rows), int(self.device.grid_cols)), config=self.cfg)

