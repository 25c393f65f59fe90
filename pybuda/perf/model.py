"""The performance model: how fast a placed netlist would run on the real card.

:func:`estimate` reads a :class:`~pybuda.netlist.Netlist` (nothing else: the netlist is the contract,
as in TT-Buda) and a :class:`~pybuda.arch.DeviceDescriptor`, and returns a :class:`PerfReport` with
cycles per op, per epoch and per microbatch, samples per second, latency, the bottleneck of every epoch
and core/math utilisation.

The model is mechanistic: the same parameters (:class:`PerfConfig`) for every model and card.

1. **Per op** (cycles per core per input, i.e. per sample of the microbatch): kernel cycles and the
   op's own data-movement bounds come from :mod:`pybuda.perf.cost` (the single source of truth, the
   balancer uses the same numbers): NoC pipes from producer ops, DRAM queues, host queues over PCIe.
   Sparse matmuls are costed by BBE's sparse formulas from their index (non-zero tiles and strips), in cost.py too.
2. **Shared links, per epoch.** Every DRAM channel serves all readers and writers of the queues placed
   on it in that epoch, so in steady state a channel must move its bytes of one input within one input
   interval: ``bytes_on_channel / channel_bw`` bounds every op that touches it. A matmul fetches in0
   once per grid row and in1 once per grid column (NoC multicast); other operands once per core.
   PCIe is shared by all host-queue traffic of the card, Ethernet by all traffic between a pair of chips.
3. **Epoch** (one ``execute``; chips of one temporal epoch run concurrently as one pipeline): steady
   state = the slowest op (or link); one execution takes ``fill + (input_count − 1) · steady`` where
   ``fill`` is when the first input's last t-slice leaves the epoch (:mod:`pybuda.perf.fill`): an op
   starts on the producer slices its first slice reads (one when both stream alike, all of them when
   its edge stacks them back), paced by the slowest of itself and its producers.
4. **Epoch switch**, paid before an execute whenever the chip ran a different graph just before:
   launch constant + every used core's kernel binaries and overlay blob + the prologue parameters of
   the epoch, all read from DRAM (per channel and per chip). Running the same graph again back to back
   reloads nothing, since L1 still holds it. When a chip runs more distinct epochs than the per-core
   binary cache has slots (32), the host re-sends every switch's binaries over PCIe each microbatch,
   ahead of the device (it may run up to 32 epochs ahead), so that is host work, not switch time.
5. **Program**: one iteration of the program's microbatch loop runs every execute in order. The host
   tilizes inputs and untilizes outputs, and moves the DRAM-resident ones over PCIe; it works ahead of
   the device when the input queue holds two microbatches (``entries ≥ 2·input_count``), otherwise
   its input and output work adds to the device time.

Every constant is a field of :class:`PerfConfig` with its source. Facts: netlist_backend_spec §5.4,
§6 and perf_calibration §2.

Calibration mechanisms (perf_calibration §1; the same parameters for every model and card):

* **Sparse matmuls cost what BBE's own sparse formulas say** (cost.py ``_sparse_matmul_cycles``, issue #16):
  the V1 (Grayskull) and V2 (Wormhole) formulas of BBE's op model with its published parameters (decode
  per strip ublock, non-zero ublock and non-zero strip; math with tile decode, reload and pack at cycles
  measured per output ublock shape), reading the busiest core's non-zero tiles (``indices_len`` over the
  grid rows) and non-zero strips (``num_nz_strips``, counted from the picker's index for the chosen
  layout, :mod:`pybuda.perf.sparse`). It replaced a [D] stand-in (the dense weights per index entry),
  which charged a one-column product 22 cycles where BBE measured 335 and had no pack or decode terms.
  With it the CNN points moved from mostly optimistic to mostly pessimistic (Inception-v4 n150 1.82 →
  0.59, VoVNet n150 1.21 → 1.03, HRNet n150 1.50 → 1.21): what is left is our im2col lowering (taps in
  t, the whole activation as K), not the kernel model. Since decode is paid per strip, the legalizer pads
  a sparse matmul's K to a few blocks when no divisor does it within L1 (``blocking.sparse_u_kts``;
  Inception-v4's 386-tile stem activation went in 193 strips of 2).
* **A convolution's im2col reads its activation once per input** (cost.py ``_activation_slices``): the
  sparse matmul's output has one t slice per kernel tap, its activation one (``act_t: 1``), and the
  kernel walks every slice's entries of an in1 strip while the strip is buffered, as TT-Buda's
  convolutions did (taps stacked along rows; its t-streamed form kept ``act_t`` 1). The former re-read
  per tap made every full-resolution im2col NoC-bound (ResNet-50's max-pool 459k cycles per image on
  e150) and, with BBE's sparse formulas, left the Grayskull CNN points at 0.52-0.80x. With both,
  12 of the 18 calibration points are within 15 %; the misses are n150 CNNs modelled too fast (VoVNet
  1.41, Inception-v4 1.63, HRNet 1.36), ResNet-50 e150 0.79, VoVNet e150 0.63 and U-Net e75 1.16.
  (Probed under the former sparse stand-in, the same change made every stem far too fast; see below.)
* **Shared sources are split among distinct fetches** (cost.py ``distinct_fetchers``): a matmul
  operand is fetched once per grid row/column and multicast, so the per-op DRAM/PCIe bound of a tall
  sparse-matmul grid no longer charges every core the whole activation. This was a balancer-visible
  error too: it kept ResNet-50's stem im2col on 4 cores (451k cycles/image, −42 % on n150).
* **Large streamed DRAM queues are spread over the channels** (placer/dram.py ``_spread_grid``; a
  compiler change, not a model constant). Evidence: the per-channel accounting below showed ResNet-50
  e150 epoch 0 bound at 946k cycles/image by one GS channel holding the 3.3 MB/image input queue
  (grid [1,1]) and the stem im2col's 805 KB index table re-read by each of its 8 core rows; TT-Buda's
  placer gives input queues a grid of buffers over the channels. Device-side inputs, e2e queues and
  streamed (non-prologue) constants with an entry ≥ 256 KiB now get up to one buffer per channel, and
  ``_spread`` charges each buffer's channel its share. ResNet-50 e150 652 → ~876 img/s (epoch 0 now
  kernel-bound on the stem sparse matmul); BERT-Large e150 111 → ~145 sen/s — its former +12 % match
  was an artefact of the single-channel 384×1024 input queue, so BERT-Large is now ~1.5–1.6× fast on
  *both* cards: the missing mechanism is BERT-specific.
* **A DRAM buffer moves its bytes through one NoC endpoint of its channel** (estimator ``_endpoint_cycles``,
  ``PerfConfig.dram_read_endpoint_bytes_per_cycle`` / ``dram_write_endpoint_bytes_per_cycle``): a queue
  buffer's ``read_ports``/``write_ports`` entry picks one of its channel's endpoints (NBS §1.2; Wormhole has
  3 per channel, NBS §5.1), and a DRAM endpoint injects reads at 23.2 B/cycle and absorbs writes at 24.0
  (tt-npe, NBS §6.3) — below the 40.8 B/cycle of a Wormhole channel's two measured blocks (NBS §5.4; PyBuda's
  balancer used an observed 20.4 B/cycle per WH reader). A queue without ports has its buffers on one channel
  take the endpoints in turn [D]. The channel's own rate still bounds reads plus writes; Grayskull (one
  endpoint per channel, 9.4 B/cycle channels) is unchanged. HRNet-V2-W64 n150 1.36 → 1.08; no other
  calibration point moves (the balancer does not see it: epoch-level link sharing is the estimator's, as
  for the channels). Caveats: the endpoints that bind there carry the streamed picker tables of our
  nearest-upsample lowering (``upsample_nearest2d_*.rows0T_0.sparse``, one buffer per channel of several
  queues, all on the first endpoint), which TT-Buda did not have; and the default port matters — taking a
  channel's endpoints in turn across all its queues' buffers gives HRNet n150 1.20, the routing module's
  nearest-endpoint-per-pipe rule 1.22.
* **Sparse matmul tables stay in L1** (legalizer + netlist validator, ``sparse_table_tiles_per_core``):
  a picker's unique tiles and its grid row's share of the index are prologue, as in TT-Buda. The
  validator used to size them as ``t`` output mblocks, so the ResNet stem's 161 KB index (49 taps) did
  not fit and was re-read from DRAM for every image (6.4 MB/image on GS). ResNet-50 n150 −21 % → −9 %.
* **Compiler changes TT-Buda had** (not model constants): host-side convolution *prestride*
  (``enable_conv_prestride``, passes/graph/prestride.py: the stem's 49 taps become 16) and no −inf padding
  mask for a max-pool that reads a relu's output (zero padding is exact there).
* **Binary re-sends run at the host's write rate** (``host_binary_write_bytes_per_s``). A chip that
  runs more distinct epochs than the binary cache holds makes the host rewrite every epoch's binaries
  each microbatch; the runtime writes them core by core through PCIe TLB windows, ~1.2 GB/s, not at
  the 24 GB/s DMA rate. Both BERT-Large placements (49 epochs on e150, 74 on n150; the device alone
  would give 145 and 192 sen/s) become host-bound at 120 sen/s (+21 %, +2 %); ResNet-50 (3 epochs)
  is untouched. The rate is the one derived constant fitted here (see its field).
* Checked and small for BERT (model numbers, microbatch 64): epoch switches (launch + binaries +
  prologue at measured DRAM rates) are 3 % of device time, pipeline fill 4 %; host tilize/PCIe of the
  inputs/outputs overlaps the device; DRAM channels use the measured per-channel rate (spec §5.4).
* **Fork/join stalls and gather pipes** are implemented but *off by default* (``PerfConfig.fork_join_stalls``,
  ``PerfConfig.gather_pipes``), because neither, as the spec states it, moves all four calibration
  points the right way with one parameter set:

  - *Fork/join* (NBS §6.4: ops pipeline over macro-blocks, a consumer frees producer space only after
    math on the block): ``_fork_join`` treats each fork P → … → join J as a marked-graph loop whose
    tokens are the short path's buffers (P's ``buf_size_mb``, J's input buffer, intermediate ops'
    output buffers, in inputs: ``buf_size_mb / t``) and whose latency is every op on the loop at its
    per-mblock time ``cycles / t``; the interval per input is at least latency / tokens. With the
    netlists our compiler emits (no fork/join buffering nops or e2e queues, ``buf_size_mb`` 1–2)
    it bounds BERT's LayerNorm (sub_mean → square → var → sqrt → recip → scale) and softmax
    (exp → sum → recip → out) epochs: BERT-L n150 192 → 175 sen/s, but e150 145 → 53 (−47 %), and
    ResNet-50 residual blocks (t = 1, whole-tensor mblocks, ``buf_size_mb`` 1) collapse
    (e150 886 → 254, n150 2269 → 1115). Macro-block granularity is far too coarse for t = 1 ops whose
    consumers stream row strips, and TT-Buda's balancer buffered ResNet's fork/joins; modelling this
    properly needs the compiler's fork/join buffering pass (raise the short path's ``buf_size_mb`` /
    insert buffering nops while L1 allows, else an e2e queue) plus a row-strip granularity — not done.
  - *Gather pipes* (NBS §6.3: ~28 GB/s for a one-source pipe, ~16 down to ~10 GB/s when a consumer
    core gathers from many producer cores; the source count is the largest among the input's pipes in
    :mod:`pybuda.backend_build.routing`, which overlap the producer's and consumer's blocks) instead of cost.py's
    flat 16 B/cycle: BERT-L e150 145 → 126 (+27 %), n150 192 → 184 (+55 %), but ResNet-50 n150
    2269 → 2062 (−29 %, fails) and e150 886 → 827, because the balancer (which still costs pipes at
    cost.py's flat rate) leaves ResNet's max-pool im2col on 2 cores gathering a 112×112×64 activation.
    Turning it on needs the producer grid in cost.py's ``BandwidthContext`` so the balancer sees the
    same rate (cost.py is the single source of per-op cycles).
* ``PYBUDA_EXP_APPROX``, which benchmarking set for BERT, is applied (``pybuda benchmark``'s BERT recipe):
  exp runs in ``approximate_mode`` and costs its ``approx_tile`` coefficient here. TT-Buda's
  balancer priced standalone ops as exact all the same (its op-model description set the approximate flag
  for fused ops only), so Ribbon does too and reproduces the same placements (BERT-Large: 72/74 epochs,
  host-bound, unchanged); our own policy sees the real cost (n150 185.6 → 228.4 sen/s).
* Placement (issue #16): the NLP policy's whole-cost score (:mod:`pybuda.balancer.wholecost`) sees the
  binary cache, the pipeline fill and the prologue re-reads of each epoch switch.
* **Calibration beyond the four points** (issue #16, tests/perf/test_calibration.py): MobileNetV2, VoVNet,
  Inception-v4, HRNet and U-Net on the cards of TT-Buda's table, with no new parameters. ConvTranspose2d
  with stride == kernel is one matmul and a depth-to-space, not a dense "dilate" picker (U-Net). A sparse
  matmul cannot t-stream, so convolutions and row pickers with too many output row tiles for its cores'
  L1 are sliced into row bands joined by a splice (``passes/lower/conv.row_bands``; Inception-v4 and U-Net
  compile on Grayskull). Tile-aligned channel concatenation is a ``splice`` (costed by the n-ary formula,
  each input charged its share of the tiles), as in TT-Buda.
* **Ribbon keeps a convolution's im2col with its weight matmul** (balancer/policies ``sparse_dense_partner``;
  a placement change, not a model constant): TT-Buda's Ribbon placed a sparse matmul and the dense matmul
  or reduce of the same op that alone reads it in one epoch (policy_utils ``place_sparse_dense_pair``),
  ending the epoch before the sparse matmul when the pair did not fit. Ours cut between them, so the kh·kw
  taps of a full activation went through a DRAM queue: VoVNet's first stage on Grayskull was bound by
  7.4 MB/image of im2col output on the channels. VoVNet e150 0.63 → 0.81, e75 0.95 → 1.05, ResNet-50
  e150 0.79 → 0.83, Inception-v4 e75 1.10 → 1.15; the Wormhole points move by ≤ 2 %.
* **Probed for issue #16 and left off** (Ribbon netlists of the 18 points re-estimated, modelled/published;
  these probes predate BBE's sparse formulas, so their ratios are under the former sparse stand-in):
  no single mechanism moves a family into ±15 % without pushing another out, so none was adopted.

  - *A pack term of 28 or 56 cycles per output tile* on the former sparse stand-in (the missing term BBE's
    formula has): VoVNet n150 1.21 → 1.08–1.20, HRNet e150 1.16 → 0.99–1.15, Inception unchanged (NoC-bound);
    superseded by BBE's own formula.

  - *Gather pipes on* (``gather_pipes``): U-Net n150 0.63 → 0.91, VoVNet n150 1.28 → 1.06, MobileNetV2
    e150 1.14 → 1.01, but ResNet-50 n150 1.02 → 0.84, e150 0.73 → 0.60 and VoVNet e150 0.99 → 0.81: the
    ResNet max-pool im2col that bounds both ResNet points gathers from 7 producer cores. Rates per cycle
    instead of per GB/s on Grayskull (0.66 / 0.90 for ResNet / VoVNet e150) do not rescue it.
  - *A sparse matmul streaming its activation once per input* instead of once per output t slice
    (``act_t`` 1): ResNet-50 n150 1.97, Inception-v4 2.0–2.1, U-Net n150 1.45 — every stem gets far too fast.
  - *U-Net is the im2col netlist, not a model constant*: halving the activation traffic of the four
    full-resolution im2col matmuls alone gives n150 1.04, e150 0.86, e75 0.87; trimming each row band's K
    to its own input rows (plus halo; today every band re-streams the whole 256x256 activation once per tap)
    gives 1.30 / 1.00 / 1.01. Ribbon also packs 46 ops of the first two levels into one n150 epoch, where
    its weight matmuls alone take about 0.4M cycles/image.
  - The CNNs' modelled n150/e150 ratio exceeds the published one by the same factor for every model
    (ResNet-50 1.39, VoVNet 1.29, Inception-v4 1.28, HRNet 1.28; BERT 1.06, U-Net 1.07), which points at
    something Wormhole-wide in the convolution path (LoFi Bfp8 kernels leave data movement and per-tile
    overheads exposed), not at the per-model structure.
  - *The e150's DRAM data rate* (3.7 GT/s LPDDR4, 118 GB/s, against the 3.2 GT/s / 102 GB/s that BBE's
    12.8 / 10.5 GiB/s per-channel figures describe: e75): with the sparse/dense pairing, ResNet-50 e150
    0.83 → 0.87 and VoVNet e150 stays 0.81, but Inception-v4 e150 0.91 → 1.19 and HRNet e150 1.13 → 1.19
    (Ribbon re-cuts both into more epochs), so the descriptors keep BBE's rate on both Grayskull cards.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

# The model lives in these modules; this one is the entry point and keeps every name importable from here.
from pybuda.perf.config import BOUNDS, KiB, PerfConfig  # noqa: F401
from pybuda.perf.estimator import _Estimator  # noqa: F401
from pybuda.perf.program import (  # noqa: F401
    _MAX_UNROLL, _UNIT_MATMUL, _UNIT_MODEL, _chip_of, _CostModel, _CostOp, _Exec, _flatten, _fused_table,
    _group_temporal, _input_buffer_tiles, _pick_program, _UnitMatmul, _UnitModel,
)
from pybuda.perf.types import EpochPerf, OpPerf, PerfReport  # noqa: F401
from pybuda.errors import ConfigError
from pybuda.netlist.model import Netlist

__all__ = [
    "PerfConfig",
    "OpPerf",
    "EpochPerf",
    "PerfReport",
    "estimate",
    "estimate_compiled",
    "placer_temporal_epochs",
    "BOUNDS",
]


def _resolve_device(netlist: Netlist, device: Any) -> Any:
    from pybuda.arch import get_device_descriptor

    if device is None:
        if netlist.arch is None:
            raise ConfigError("the netlist names several archs; pass a device (descriptor or preset name)")
        chips = 1 + max((_chip_of(g.target_device) for g in netlist.graphs.values()), default=0)
        return get_device_descriptor(netlist.arch, num_chips=chips)
    if isinstance(device, str):
        return get_device_descriptor(device_config=device)
    return device


def _arch_matches(netlist_arch: Optional[str], device: Any) -> bool:
    if netlist_arch is None:
        return True
    dev = str(getattr(getattr(device, "arch", ""), "value", getattr(device, "arch", ""))).lower()
    na = netlist_arch.lower()
    return dev.startswith(na[:4]) or na.startswith(dev[:4])


def estimate(netlist: Netlist, device: Any = None, microbatch: Optional[int] = None,
             config: Optional[PerfConfig] = None, *, program: Optional[str] = None,
             temporal_epochs: Optional[Mapping[str, int]] = None) -> PerfReport:
    """Model how fast ``netlist`` runs on ``device``.

    ``device`` is a :class:`~pybuda.arch.DeviceDescriptor`, a preset name (``wh_n150`` …) or None for
    the unharvested die of the netlist's arch. ``microbatch`` is the number of samples one iteration of
    the program's microbatch loop processes; by default the ``input_count`` of the first graph fed by the
    host (passing another value scales every ``input_count``: a what-if that keeps the placement).
    ``config`` holds the model's constants (:class:`PerfConfig`). ``program`` picks a program (default:
    the first that executes a graph); ``temporal_epochs`` maps graph names to temporal epoch indices when
    the default grouping (consecutive graphs on distinct chips run concurrently) is not wanted.

    Raises :class:`~pybuda.errors.ConfigError` for a device whose arch differs from the netlist's, and
    :class:`~pybuda.errors.NetlistError` for a netlist with nothing to run.
    """
    if not isinstance(netlist, Netlist):
        raise ConfigError(f"estimate() needs a pybuda.netlist.Netlist, got {type(netlist).__name__}")
    cfg = config if config is not None else PerfConfig()
    if not isinstance(cfg, PerfConfig):
        raise ConfigError(f"config must be a PerfConfig, got {type(cfg).__name__}")
    dev = _resolve_device(netlist, device)
    if not _arch_matches(netlist.arch, dev):
        raise ConfigError(f"netlist targets {netlist.arch}, device {getattr(dev, 'name', dev)} is "
                          f"{getattr(dev.arch, 'value', dev.arch)}")
    max_chip = max((_chip_of(g.target_device) for g in netlist.graphs.values()), default=0)
    if max_chip >= int(getattr(dev, "chip_count", 1)):
        raise ConfigError(f"netlist uses chip {max_chip} but {getattr(dev, 'name', 'the device')} has "
                          f"{getattr(dev, 'chip_count', 1)} chip(s)")
    return _Estimator(netlist, dev, microbatch, cfg, program, temporal_epochs).run()


def estimate_compiled(results: Any, microbatch: Optional[int] = None, config: Optional[PerfConfig] = None) -> PerfReport:
    """:func:`estimate` for a compile's results (:class:`pybuda.compile.CompileResults`): its netlist
    on its device, with the placer's temporal epochs when the netlist's graphs are the placer's epochs
    (graphs named ``<epoch_type>_<global_epoch>``, as the netlist generator names them)."""
    netlist = getattr(results, "netlist", None)
    if netlist is None:
        raise ConfigError("the compile results hold no netlist (compile to GENERATE_NETLIST or further)")
    return estimate(netlist, getattr(results, "device", None), microbatch=microbatch, config=config,
                    temporal_epochs=placer_temporal_epochs(results))


def placer_temporal_epochs(results: Any) -> Optional[Dict[str, int]]:
    """Netlist graph -> the placer's temporal epoch, for a compile's results (duck-typed
    :class:`pybuda.compile.CompileResults`), when the netlist's graphs are the placer's epochs (graphs named
    ``<epoch_type>_<global_epoch>``, as the netlist generator names them); None otherwise. A device image
    stores this map, so a loaded image is modelled as its compile was."""
    netlist = getattr(results, "netlist", None)
    placement = getattr(results, "placer_solution", None)
    if netlist is None or placement is None or not getattr(placement, "epochs", None):
        return None
    names = {f"{e.epoch_type}_{e.global_epoch}": int(e.temporal_epoch) for e in placement.epochs}
    return names if set(names) == set(netlist.graphs) else None
