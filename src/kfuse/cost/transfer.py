"""The transfer model: ranks kernels and plans when no calibration is at hand (cost/calibrated.py).

time(kernel) = bytes it moves / bandwidth + launch overhead + a memset when it has reduced outputs
               + atomic traffic of reduced outputs stored every serial iteration
               + local barriers executed every serial iteration
               + the recompute of values across a stencil's halo (``halo_time``)
(a kernel of thread-block clusters streams at its widest tile's pace, and no faster than its
strips follow each other: ``cluster_stream``)
time(plan)   = sum over its kernels

Bytes count each array once per load or store routine that moves it.  The atomic term charges each warp that
adds an instance's partial result to global memory (a reduced output that follows the loop
axis is stored once per instance instead of once per block) and each local barrier inside the
loop per instance, both fitted to sweeps of BiCGK and GEMVER implementations (``Machine``'s
``atomic`` and ``barrier``; docs/design.md, 'The calibrated model').
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..codegen.kernel import KernelCode, Step
from ..ir.halo import neighbourhood, reads_per_point, recomputed
from ..ir.program import Value
from ..ir.kernel import target_blocks
from ..runtime.gpu import H100_DEVICE as H100_FACTS


@dataclass(frozen=True)
class Machine:
    name: str = "transfer model (H100 defaults)"
    bandwidth: float = 3.0e12       # bytes/s, device-to-device copy (read + write)
    launch: float = 2.5e-6          # s per kernel launch
    clear: float = 1.5e-6           # s for the memset clearing a kernel's reduced outputs
    atomic: float = 0.17e-9         # s per warp adding an instance's partial to global memory
    barrier: float = 0.05e-9        # s per local barrier executed by an instance
    # s per strip a thread-block cluster walks when the strips' latency bounds it (loads, the row
    # sums through the cluster's shared memories, the cluster barrier;
    # docs/design.md, "Strips, clusters and bands")
    cluster_strip: float = 2.2e-6
    # bytes/s of the reads a kernel makes to recompute a stencil across another stencil's halo
    # (``halo_time``): they hit L1/L2 (the neighbours of the kernel's own reads), not DRAM.  Measured
    # (H100, lap7 of lap7 at 256^3 and lap5 of lap5 at 4096^2, both dtypes: 16-20 TB/s over the two
    # kernels' traffic); a map's recompute (no index arithmetic, no edges) goes twice as fast (lap7
    # of axpy at 256^3: 35-49 TB/s)
    cache_bandwidth: float = 16e12
    # and a recomputed value lengthens every thread's chain of dependent reads: one kernel with
    # the recompute measured slower than two kernels at 64^3 in every case (lap7 of axpy 1.1-1.4x,
    # of lap7 1.4-1.7x), as if the launch it saves cost nothing (the calibrated model's launch
    # term, which prices the other plan's kernels, is about this)
    halo_latency: float = 10e-6
    # the GPU's multiprocessor facts, as a calibration's ``device`` (the planner's waves and serial
    # iterations, a cluster kernel's resident blocks)
    device: dict = field(default_factory=lambda: dict(H100_FACTS), compare=False, hash=False)

    @property
    def sms(self) -> int:
        """Multiprocessors."""
        return self.device["sms"]

    @property
    def launch_seconds(self) -> float:
        return self.launch

    def kernel_time(self, code: KernelCode, dims: dict[int, int], entries: dict[int, int],
                    itemsize: int) -> float:
        """The interface every cost model offers (cost.Model)."""
        return kernel_time(code, dims, entries, itemsize, self)

    def body_time(self, code: KernelCode, dims: dict[int, int], entries: dict[int, int], itemsize: int) -> float:
        """``kernel_time`` without the launch and clear terms (a device loop's step: ``queued.py``)."""
        return kernel_time(code, dims, entries, itemsize, self) - self.launch - bool(code.launch.clears) * self.clear


DEFAULT_MACHINE = Machine()


def kernel_bytes(code: KernelCode, entries: dict[int, int], itemsize: int,
                 dims: dict[int, int] | None = None) -> int:
    """Each array once per load or store routine that moves it (an array that two calls load
    with different thread mappings crosses the bus twice), and each gathered input once.  A
    kernel on a triangle moves the share of each matrix its upper tiles cover (about half;
    ``dims`` needed)."""
    moves = [s.kc.call.bindings()[str(s.routine.param)] for s in code.steps
             if s.routine is not None and s.routine.kind in ("load", "store")]
    gathered = sum(entries[v] for v in gathered_values(code))
    if code.launch.triangle and dims is not None:
        T = code.launch.counts(dims)[0]
        share = code.launch.instances(dims) / max(1, T * T)
        return int((sum(entries[v.id] * (share if v.type == "matrix" else 1.0) for v in moves) + gathered) * itemsize)
    return (sum(entries[v.id] for v in moves) + gathered) * itemsize


def gathered_values(code: KernelCode) -> set[int]:
    """Ids of the values the kernel's compute routines read through global views (inputs read
    beyond their element: a stencil's neighbourhood, a gather), each counted as one pass over it
    (the neighbours' entries come again from the caches)."""
    out = set()
    for s in code.steps:
        if s.routine is not None and s.routine.kind == "compute":
            params = {p.name: p for p in s.kc.call.function.params}
            binds = s.kc.call.bindings()
            out |= {binds[a.name].id for a in s.routine.args if a.kind == "global" and params[a.name].gathered}
    if out:
        out -= set(recomputed(code.spec.calls))     # evaluated, not read: halo_time
    return out


def halo_time(code: KernelCode, entries: dict[int, int], itemsize: int, machine: Machine) -> float:
    """Seconds a kernel spends recomputing values across stencils' halos (``ir/halo.py``): every
    point of a stencil reading such a value evaluates its producer at each point of its
    neighbourhood (``neighbourhood``: the star or the box), and each evaluation reads the
    producer's inputs (``reads_per_point``: lap7 of a lap7 reads 7 x 7 entries a point, of an axpy
    7 x 2) at the cache bandwidth (twice that for a producer that is no stencil), plus the
    recompute's latency (``Machine.halo_latency``).  The first reads of the producer's inputs are
    its own passes over them, counted in ``kernel_bytes``."""
    halo = recomputed(code.spec.calls)
    if not halo:
        return 0.0
    seconds = 0.0
    for kc in code.spec.calls:
        fn = kc.call.function
        for p, a in zip(fn.inputs, kc.call.args):
            if fn.grid and p.reach == "neighbours" and isinstance(a, Value) and a.id in halo:
                producer = halo[a.id].call.function
                reads = entries[a.id] * neighbourhood(fn) * reads_per_point(producer) * itemsize
                seconds += (reads / (machine.cache_bandwidth * (1 if producer.grid else 2))
                            + machine.halo_latency)
    return seconds


def atomic_warps(code: KernelCode, dims: dict[int, int]) -> int:
    """Warps adding per-instance partials of reduced outputs inside the serial loop."""
    instances = code.launch.instances(dims)
    total = 0
    for s in code.steps:
        warps = atomic_step_warps(s)
        if warps:
            # a span's instances sum an output that does not follow the axis across the loop
            # on chip and store it once
            per = code.launch.span if s.once_per_span else 1
            total += -(-instances // per) * warps
    return total


def atomic_step_warps(s: Step) -> int:
    """Warps of an instance that a step's store adds with (a reduced output's partial stored
    inside the serial loop); 0 for other steps."""
    if s.phase != "loop" or s.routine is None or s.routine.kind != "store":
        return 0
    if not s.kc.call.function.param(str(s.routine.param)).reduce:
        return 0
    X, Y = s.kc.shape(s.routine)
    return max(1, (X * Y) // 32)


def loop_barriers(code: KernelCode, dims: dict[int, int]) -> int:
    """Local barriers executed inside the serial loop, summed over instances."""
    instances = code.launch.instances(dims)
    return instances * sum(1 for s in code.steps if s.phase == "loop" and s.barrier)


def cluster_stream(code: KernelCode, dims: dict[int, int], seconds: float, machine: Machine) -> float:
    """The streaming time of a kernel of thread-block clusters: a cluster's blocks meet at every
    strip, so the strip goes at the pace of its widest tile (C x NC entries of a row of n: the
    time scales by C NC / n), and the strips of one cluster follow each other (at least
    ``cluster_strip`` each, its serial iterations over the clusters resident at once)."""
    L = code.launch
    if L.cluster <= 1:
        return seconds
    ax = L.cluster_axis
    imbalance = max(1.0, L.cluster * L.axis_extent[ax] / max(1, dims[L.axis_dims[ax]]))
    strips = L.iterations(dims, target_blocks(machine.sms, machine.device["max_threads_per_sm"], L.threads))
    return max(seconds * imbalance, strips * machine.cluster_strip)


def kernel_time(code: KernelCode, dims: dict[int, int], entries: dict[int, int], itemsize: int,
                machine: Machine = DEFAULT_MACHINE) -> float:
    stream = cluster_stream(code, dims, kernel_bytes(code, entries, itemsize, dims) / machine.bandwidth, machine)
    return (stream + machine.launch + halo_time(code, entries, itemsize, machine)
            + bool(code.launch.clears) * machine.clear + atomic_warps(code, dims) * machine.atomic
            + loop_barriers(code, dims) * machine.barrier)
