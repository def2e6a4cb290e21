"""``kfuse calibrate`` (GPU): time every probe in every environment, plus launch, clear and barrier.

Each micro-kernel (``probes.py``) runs over a large instance space (a 2^25-entry vector or an
8192 x 8192 matrix; ``quick``: 2^23 and 4096) with the executor's grid rule (two waves of blocks,
serial iterations to cover the rest), timed with CUDA events (median).  Its cost per execution is
(time - launch overhead) / instances.  The launch overhead is the time of an empty kernel; a clear
is a memset before a kernel; a barrier is the difference a local barrier in every serial
iteration makes to a load probe, per instance, for each block size.  Micro-kernels are compiled with NVRTC in modules
of ``CHUNK`` kernels, several modules at once (progress on stderr).
"""
from __future__ import annotations

import math
import os
import sys
import time
from typing import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import replace

import numpy as np

from .. import __version__
from ..errors import CompileError
from ..library.schema import Library
from ..runtime.compiler import load_module
from ..progress import Progress
from ..runtime.gpu import cupy, device_info
from ..runtime.timing import median_us
from ..cost.calibrated import resident_fraction
from ..cost.store import Calibration, kernel_factor_key, source_digest
from .kernels import measure as measure_kernels, targets as kernel_targets
from .probes import Env, Probe, barrier_probes, library_probes, probe_module

CHUNK = 96                  # micro-kernels per NVRTC module
SIZES = {False: {"n": 8192, "N": 2**25}, True: {"n": 4096, "N": 2**23}}
REPS = {False: 15, True: 5}

class _Arrays:
    """Global arrays the micro-kernels read and write, shared by all of them."""

    def __init__(self, lib: Library, dtype: str, n: int, N: int):
        self.cp, self.dtype, self.n, self.N, self.lib = cupy(), np.dtype(dtype), n, N, lib
        self.pool: dict[tuple, object] = {}

    def get(self, typ: str, axis: str, nesting: int, slot: int):
        shape = {"matrix": (self.n, self.n), "scalar": (1,),
                 "vector": (self.n,) if nesting == 2 else (self.N,)}[typ]
        key = (shape, slot)
        if key not in self.pool:
            self.pool[key] = self.cp.zeros(shape, dtype=self.dtype)
        return self.pool[key]

    def counts(self, nesting: int, tile: tuple[int, int] | None = None) -> tuple[int, ...]:
        if nesting == 2:
            tile = tile or self.lib.tile
            return (-(-self.n // tile[0]), -(-self.n // tile[1]))
        return (-(-self.N // self.lib.subvector),)


def _launch(probe: Probe, env: Env, func, arrays: _Arrays, dev: dict, sink):
    """(a callable launching the micro-kernel once, instances, resident fraction or None when the
    occupancy cannot be halved)."""
    dt = arrays.dtype.type
    args: list = []
    for slot, (_name, typ, axis) in enumerate(probe.globals()):
        arr = arrays.get(typ, axis, probe.nesting, slot)
        args.append(arr)
        args.extend(np.int64(s) for s in arr.shape if typ != "scalar")
    args += [dt(1.0) for _ in probe.scalars()]
    counts = arrays.counts(probe.nesting, probe.tile)
    args += [np.int64(c) for c in counts]
    threads = probe.threads * env.ipb
    if probe.nesting == 2:
        along, across = (counts[0], counts[1]) if env.loop == "i" else (counts[1], counts[0])
    else:
        along, across = counts[0], 1
    target = 2 * dev["sms"] * max(1, dev["max_threads_per_sm"] // threads)
    iters = max(1, -(-along // (max(1, target // across) * env.ipb)))
    grid = across * -(-along // (iters * env.ipb))
    args += [np.int32(iters), np.int32(0), sink]
    static = probe.shared_entries() * env.ipb * arrays.dtype.itemsize
    dyn = 0
    resident = resident_fraction(dev, threads, static)
    if env.occupancy == "half":
        blocks = round(resident * dev["max_threads_per_sm"] / threads)
        if blocks < 2:
            return None, 0, None
        want = blocks // 2
        dyn = dev["smem_per_sm"] // want - dev["smem_reserved"] - static
        dyn = min(dyn, dev["smem_optin"] - static)
        if dyn > 48 * 1024:
            try:
                func.max_dynamic_shared_size_bytes = dyn
            except Exception:   # noqa: BLE001 - no opt-in: as much as a block may take without it
                dyn = 48 * 1024 - static
        resident = resident_fraction(dev, threads, static + dyn)
    packed = tuple(args)
    if dyn:
        cp = arrays.cp
        # a launch the driver refuses (the opt-in above not honoured for this function): as much
        # shared memory as a block may take without it, else no half-occupancy point
        for attempt in (dyn, 48 * 1024 - static):
            try:
                func((grid,), (threads,), packed, shared_mem=attempt)
                cp.cuda.runtime.deviceSynchronize()
                dyn = attempt
                break
            except cp.cuda.driver.CUDADriverError:
                continue
        else:
            return None, 0, None
        resident = resident_fraction(dev, threads, static + dyn)
        if resident >= resident_fraction(dev, threads, static):
            return None, 0, None

    def run():
        func((grid,), (threads,), packed, shared_mem=dyn)
    return run, math.prod(counts), resident


def _sig(x: float) -> float:
    """Five significant digits (costs per execution span 1e-4 to 10 ns)."""
    return float(f"{x:.5g}")


def _compile_all(sources: list[str], prog: Progress, log) -> list:
    device = cupy().cuda.Device().id
    modules: list = [None] * len(sources)

    def work(n: int):
        with cupy().cuda.Device(device):
            return n, load_module(sources[n])
    try:
        with ThreadPoolExecutor(max_workers=max(1, min(8, (os.cpu_count() or 2) - 1))) as pool:
            for fut in as_completed([pool.submit(work, n) for n in range(len(sources))]):
                n, mod = fut.result()
                modules[n] = mod
                prog.step()
    except CompileError:
        raise
    except Exception as e:   # noqa: BLE001 - threads unusable here: compile the rest one by one
        log(f"  parallel compilation failed ({e.__class__.__name__}: {e}); compiling sequentially")
        for n, src in enumerate(sources):
            if modules[n] is None:
                modules[n] = load_module(src)
                prog.step()
    return modules


def _jobs(probes: dict[str, Probe], todo: list[Probe], quick: bool):
    """Kernel name -> (probe, environment) for every environment to time, and (nesting, threads)
    -> (kernel without, kernel with a barrier) for the barrier probes."""
    jobs: dict[str, tuple[Probe, Env]] = {}
    for p in todo:
        for env in p.environments(quick):
            jobs[p.kernel_name(env)] = (p, env)
    bar_jobs = {}
    for nest, threads, p, plain in barrier_probes(probes):
        with_bar = replace(plain, barrier=True)
        for env in (plain, with_bar):
            jobs.setdefault(p.kernel_name(env), (p, env))
        bar_jobs[(nest, threads)] = (p.kernel_name(plain), p.kernel_name(with_bar))
    return jobs, bar_jobs


def _overheads(cp, empty, dtype: str, log) -> tuple[float, float]:
    """(launch overhead, clear) in microseconds."""
    sink = cp.zeros(1, dtype=np.dtype(dtype))
    empty_args = (np.int32(0), sink)
    launch_us = median_us(lambda: empty((1,), (32,), empty_args), reps=200, warmup=20)
    cleared = cp.zeros(8192, dtype=np.dtype(dtype))

    def clear_and_launch():
        cleared.data.memset_async(0, cleared.nbytes)
        empty((1,), (32,), empty_args)
    clear_us = max(0.0, median_us(clear_and_launch, reps=200, warmup=20) - launch_us)
    log(f"  launch overhead {launch_us:.2f} us, clear {clear_us:.2f} us")
    return launch_us, clear_us


def _time_all(cp, jobs: dict[str, tuple[Probe, Env]], funcs, arrays, dev, sink, reps: int, launch_ns: float, log) -> dict[str, tuple[float, float]]:
    """Kernel name -> (ns per execution, resident fraction), after half a second of the first
    kernel (clocks up, memory warm)."""
    names = list(jobs)
    times: dict[str, tuple[float, float]] = {}
    if names:
        run, _, _ = _launch(*jobs[names[0]], funcs[names[0]], arrays, dev, sink)
        t_end = time.perf_counter() + 0.5
        while run is not None and time.perf_counter() < t_end:
            for _ in range(20):
                run()
            cp.cuda.get_current_stream().synchronize()
    prog = Progress("timing", len(names), log)
    for k in names:
        p, env = jobs[k]
        run, instances, resident = _launch(p, env, funcs[k], arrays, dev, sink)
        if run is not None:
            t = median_us(run, reps=reps, warmup=2)
            times[k] = (max(0.0, t * 1e3 - launch_ns) / instances, resident)
        prog.step()
    prog.close()
    cp.cuda.get_current_stream().synchronize()
    return times


def _results(todo: list[Probe], known: dict, times: dict, bar_jobs: dict, quick: bool, log):
    """(probe id -> measured points, nesting -> threads -> barrier ns per instance)."""
    measured = dict(known)
    for p in todo:
        points = []
        for env in p.environments(quick):
            got = times.get(p.kernel_name(env))
            if got is not None:
                points.append({**env.to_json(), "resident": round(got[1], 4), "ns": _sig(got[0])})
        measured[p.id] = {"kind": p.kind, "atomic": p.atomic, "nesting": p.nesting, "points": points}
    barrier: dict[int, dict[int, float]] = {}
    for (nest, threads), (plain, with_bar) in bar_jobs.items():
        barrier.setdefault(nest, {})[threads] = _sig(max(0.0, times[with_bar][0] - times[plain][0]))
    log("  barrier per instance: " + "; ".join(
        f"{'nested' if n == 2 else 'unnested'} " + ", ".join(f"{v:.3f} ns ({t} threads)" for t, v in sorted(b.items()))
        for n, b in sorted(barrier.items())))
    return measured, barrier


def calibrate(lib: Library, dtype: str = "float32", quick: bool = False, reuse: Sequence[Calibration] = (),
              log=None, kernels: bool = True) -> Calibration:
    """Measure every routine of ``lib`` on the current GPU (probes already measured in a ``reuse``
    calibration of this GPU and dtype, as quick or not as this one, are taken from it), then
    (``kernels``) the kernel factors of the functions timed whole (``kernels.py``; those of
    unchanged source in a ``reuse`` calibration taken from it)."""
    from ..runtime.gpu import gpu_name
    cp = cupy()
    log = log or (lambda m: print(m, file=sys.stderr, flush=True))
    t0 = time.perf_counter()
    dev = device_info(cp.cuda.Device().id)
    gpu = gpu_name() or "unknown GPU"
    sizes, reps = SIZES[quick], REPS[quick]
    routines, probes = library_probes(lib)
    known: dict[str, dict] = {}
    known_kernels: dict[str, dict] = {}
    for cal in reuse:
        if cal.gpu == gpu and cal.dtype == dtype and bool(cal.meta.get("quick")) == quick:
            for pid, data in cal.probes.items():
                known.setdefault(pid, data)
            for key, data in cal.kernels.items():
                known_kernels.setdefault(key, data)
    todo = [p for pid, p in probes.items() if pid not in known]
    jobs, bar_jobs = _jobs(probes, todo, quick)
    log(f"calibrate {gpu}, library {lib.name} ({lib.digest}), {dtype}: {len(routines)} routines, "
        f"{len(probes)} distinct micro-kernels ({len(probes) - len(todo)} already measured), "
        f"{len(jobs)} environments to time" + (" [quick]" if quick else ""))

    # compile: NVRTC modules in worker threads (NVRTC releases the GIL), one by one if that fails
    names = list(jobs)
    chunks = [names[k:k + CHUNK] for k in range(0, len(names), CHUNK)] or [[]]
    sources = [probe_module(lib, dtype, [jobs[k] for k in chunk], title=f"chunk {n + 1}/{len(chunks)}",
                            empty=(n == 0)) for n, chunk in enumerate(chunks)]
    prog = Progress("compiling (NVRTC)", len(chunks), log)
    modules = _compile_all(sources, prog, log)
    prog.close()
    funcs = {k: modules[n].get_function(k) for n, chunk in enumerate(chunks) for k in chunk}

    launch_us, clear_us = _overheads(cp, modules[0].get_function("kfc_empty"), dtype, log)
    arrays = _Arrays(lib, dtype, sizes["n"], sizes["N"])
    sink = cp.zeros(1, dtype=np.dtype(dtype))
    times = _time_all(cp, jobs, funcs, arrays, dev, sink, reps, launch_us * 1e3, log)
    measured, barrier = _results(todo, known, times, bar_jobs, quick, log)
    factors = measure_kernels(lib, dtype, quick, launch_us, known_kernels, log) if kernels else {}
    meta = {"written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "kfuse": __version__,
            "quick": quick, "sizes": sizes, "reps": reps}
    cal = Calibration(gpu, lib.digest, dtype, dev, round(launch_us * 1e3, 1), round(clear_us * 1e3, 1), barrier,
                      routines, {pid: measured[pid] for pid in probes}, meta, kernels=factors)
    log(f"calibrate {dtype}: done in {time.perf_counter() - t0:.1f} s")
    return cal


def carry_over(cal: Calibration, lib: Library) -> Calibration:
    """A calibration of ``lib`` from one of an earlier version of it, without a GPU: every routine
    whose micro-kernel is unchanged (its probe id hashes the kernel text and the routine's source
    file) keeps its measurement; routines of new micro-kernels are left out (``kfuse calibrate``
    measures just those, reusing the rest).  The shipped H100 calibration was carried over to the
    library with the strip variants (blas2_strip.cu) this way: strip kernels whose routines are
    unmeasured are priced by the transfer model (cost/calibrated.py)."""
    routines, _probes = library_probes(lib)
    kept = {key: pid for key, pid in routines.items() if pid in cal.probes}
    meta = dict(cal.meta, carried_from=cal.library)
    factors = {}
    for fn in kernel_targets(lib):          # kernel factors of functions whose sources did not change
        for var in fn.variants:
            key = kernel_factor_key(fn, var)
            if key in cal.kernels and cal.kernels[key]["source"] == source_digest(lib, var):
                factors[key] = cal.kernels[key]
    return Calibration(cal.gpu, lib.digest, cal.dtype, dict(cal.device), cal.launch_ns, cal.clear_ns,
                       {k: dict(v) for k, v in cal.barrier_ns.items()}, kept,
                       {pid: cal.probes[pid] for pid in sorted(set(kept.values()))}, meta, kernels=factors)
