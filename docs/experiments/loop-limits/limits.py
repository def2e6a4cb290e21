"""Hardware limits for the steps of iterative methods, beside kfuse's numbers (benchmarks/loops.py).

sweep  How fast the GPU can read an n x n matrix A over and over, L2 reuse counted: a read-only
       kernel (16-byte vector loads, grid-stride, 256 threads a block, grid = k x SMs, one partial
       sum per block) run 100 times back to back in one CUDA graph, each sweep in the same order
       ("forward") or every other one mirrored ("alternate": it starts where the sweep before ended,
       on what that left in L2).  Beside it the time of one DRAM pass over A at the copy bandwidth
       (benchmarks/loops.py's copy_bandwidth: bytes read plus written per second).
plain  The plain kfuse loop (a jitted step fed back from Python): wall time per step, GPU time per
       step with the host ahead (a spin kernel holds the stream while the host enqueues all steps),
       the host's enqueue time per step, and kfuse's device loop (fori_loop) for reference.
big    benchmarks/loops.py at n = 16384 (cg, power; float32 and float64).

    PYTHONPATH=src python3 docs/experiments/loop-limits/limits.py sweep plain > limits.txt
    PYTHONPATH=src python3 docs/experiments/loop-limits/limits.py big --out loops-16384.md
"""
from __future__ import annotations

import argparse
import statistics
import string
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))
from loops import METHODS, copy_bandwidth, kfuse_fori, kfuse_plain, problem  # noqa: E402

SWEEP = r"""
extern "C" __global__ void sweep(const $V* __restrict__ a, long long nvec, int reverse, $T* out) {
    $T acc = 0;
    long long stride = (long long)gridDim.x * blockDim.x;
    #pragma unroll 4
    for (long long v = (long long)blockIdx.x * blockDim.x + threadIdx.x; v < nvec; v += stride) {
        $V x = a[reverse ? nvec - 1 - v : v];
        acc += $SUM;
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    __shared__ $T warp[32];
    if ((threadIdx.x & 31) == 0) warp[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        $T s = 0;
        for (int w = 0; w < (int)(blockDim.x >> 5); ++w) s += warp[w];
        out[blockIdx.x] = s;
    }
}
"""
VECTOR = {"float32": ("float", "float4", "x.x + x.y + x.z + x.w"), "float64": ("double", "double2", "x.x + x.y")}

SPIN = r"""
extern "C" __global__ void spin(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}
"""


def sweep_kernel(cp, dtype: str):
    t, vec, total = VECTOR[dtype]
    return cp.RawKernel(string.Template(SWEEP).substitute(T=t, V=vec, SUM=total), "sweep")


def part_sweep(cp, args, bandwidth: float) -> None:
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    print(f"\n== sweep: {args.sweeps} sweeps of A per CUDA graph, median of {args.reps} launches; "
          f"{sms} SMs; 256 threads a block\n")
    print(f"{'n':>6} {'dtype':>8} {'order':>9} {'k':>2} {'grid':>5} {'us/sweep':>9} {'GB/s':>7}")
    summary = []
    for n in args.sizes:
        for dtype in args.dtypes:
            kernel = sweep_kernel(cp, dtype)
            A = cp.random.default_rng(0).standard_normal((n, n), dtype=dtype)
            nbytes = A.nbytes
            nvec = np.int64(nbytes // 16)
            best = None
            for order in ("forward", "alternate"):
                for k in (2, 4, 8):
                    grid = k * sms
                    out = cp.empty(grid, dtype)
                    kernel((grid,), (256,), (A, nvec, np.int32(0), out))      # compile and load outside capture
                    cp.cuda.Device().synchronize()          # the capture stream does not wait on the null stream
                    stream = cp.cuda.Stream(non_blocking=True)
                    with stream:
                        stream.begin_capture()
                        for i in range(args.sweeps):
                            rev = np.int32(order == "alternate" and i % 2 == 1)
                            kernel((grid,), (256,), (A, nvec, rev, out))
                        graph = stream.end_capture()
                    graph.launch(stream)                                      # warm-up
                    times = []
                    for _ in range(args.reps):
                        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                        e0.record(stream)
                        graph.launch(stream)
                        e1.record(stream)
                        e1.synchronize()
                        times.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3 / args.sweeps)
                    us = statistics.median(times)
                    print(f"{n:>6} {dtype:>8} {order:>9} {k:>2} {grid:>5} {us:>9.2f} {nbytes / us / 1e3:>7.0f}",
                          flush=True)
                    if best is None or us < best[0]:
                        best = (us, order, k)
                    del graph, stream
            dram = nbytes / bandwidth * 1e6
            summary.append(f"n={n:<6} {dtype}: best sweep {best[0]:.2f} us ({best[1]}, k={best[2]}, "
                           f"{nbytes / best[0] / 1e3:.0f} GB/s); DRAM pass {dram:.2f} us; sweep/DRAM {best[0] / dram:.3f}")
            del A
            cp.get_default_memory_pool().free_all_blocks()
    print("\nsummary (DRAM pass = n*n*itemsize / copy bandwidth):")
    print("\n".join(summary), flush=True)


def part_plain(cp, args) -> None:
    steps, reps = args.steps, args.reps
    spin = cp.RawKernel(SPIN, "spin")
    spin((1,), (1,), (np.uint64(1000),))
    cp.cuda.Device().synchronize()
    xp = lambda v, d: cp.asarray(v, dtype=d)        # noqa: E731 - as benchmarks/loops.py's main()

    def wall(run, state):
        """Median us per step, CUDA events on the current stream (kfuse launches there) around run."""
        times = []
        for _ in range(reps):
            cp.cuda.get_current_stream().synchronize()
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            e0.record()
            run(state, steps)
            e1.record()
            e1.synchronize()
            times.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3 / steps)
        return statistics.median(times)

    def gpu(run, state, spin_ms: float):
        """(median GPU us per step, median host enqueue us per step, host ahead in every rep)."""
        g, h, ahead = [], [], True
        for _ in range(reps):
            cp.cuda.get_current_stream().synchronize()
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            spin((1,), (1,), (np.uint64(int(spin_ms * 1e6)),))
            e0.record()
            t0 = time.perf_counter()
            run(state, steps)
            t1 = time.perf_counter()
            e1.record()
            e1.synchronize()
            g.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3 / steps)
            h.append((t1 - t0) * 1e6 / steps)
            ahead = ahead and (t1 - t0) * 1e3 < 0.9 * spin_ms
        return statistics.median(g), statistics.median(h), ahead

    print(f"\n== plain: us per step, {steps} steps, median of {reps}; wall = events around run() with nothing "
          "queued; gpu = events after a spin kernel, host enqueueing meanwhile; enqueue = host time per step\n")
    head = (f"{'method':>8} {'dtype':>7} {'n':>5} {'wall_plain':>10} {'gpu_plain':>9} {'enqueue':>8} "
            f"{'host-ahead':>10} {'spin_ms':>7} {'fori':>7} {'wall-gpu':>8} {'secs':>5}")
    print(head, flush=True)
    start = time.perf_counter()
    for n in args.plain_sizes:
        for dtype in args.dtypes:
            for method in args.methods:
                if time.perf_counter() - start > args.plain_limit:
                    print(f"{method:>8} {dtype:>7} {n:>5}  skipped: past --plain-limit {args.plain_limit} s")
                    continue
                t0 = time.perf_counter()
                try:
                    state = problem(method, n, dtype, xp)
                    plain = kfuse_plain(method)
                    plain(state, 30)
                    plain(state, 30)
                    w = wall(plain, state)
                    spin_ms = args.spin_ms
                    g, h, ahead = gpu(plain, state, spin_ms)
                    for _ in range(2):                      # the host was not ahead: a longer spin
                        if ahead:
                            break
                        spin_ms *= 4
                        g, h, ahead = gpu(plain, state, spin_ms)
                    fori = kfuse_fori(method)
                    fori(state, 30)
                    fori(state, steps)
                    f = wall(fori, state)
                    print(f"{method:>8} {dtype:>7} {n:>5} {w:>10.2f} {g:>9.2f} {h:>8.2f} {'yes' if ahead else 'no':>10} "
                          f"{spin_ms:>7.0f} {f:>7.2f} {w - g:>8.2f} {time.perf_counter() - t0:>5.1f}", flush=True)
                except Exception as e:     # noqa: BLE001 - a row that fails is reported, not fatal
                    print(f"{method:>8} {dtype:>7} {n:>5}  failed: {type(e).__name__}: {str(e).splitlines()[0][:120]}",
                          flush=True)
                    state = None
                del state
                cp.get_default_memory_pool().free_all_blocks()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("parts", nargs="+", choices=["sweep", "plain", "big"])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1024, 4096, 8192, 16384], help="sweep sizes")
    ap.add_argument("--plain-sizes", type=int, nargs="+", default=[1024, 4096])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "float64"])
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    ap.add_argument("--sweeps", type=int, default=100, help="sweeps per CUDA graph")
    ap.add_argument("--steps", type=int, default=120, help="steps per timed plain run")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--spin-ms", type=float, default=30.0, help="first spin; x4 on each retry (3 tries)")
    ap.add_argument("--plain-limit", type=float, default=1e9, help="seconds after which plain rows are skipped")
    ap.add_argument("--out", default="loops-16384.md", help="big: the markdown loops.py writes")
    args = ap.parse_args(argv)
    if "big" in args.parts:
        cmd = [sys.executable, str(ROOT / "benchmarks" / "loops.py"), args.out, "--dtypes", "float32", "float64",
               "--sizes", "16384", "--methods", "cg", "power", "--reps", "3"]
        print("$ " + " ".join(cmd), flush=True)
        subprocess.run(cmd, check=False)
    if not {"sweep", "plain"} & set(args.parts):
        return 0
    import cupy as cp
    props = cp.cuda.runtime.getDeviceProperties(0)
    bandwidth = copy_bandwidth(cp)
    print(f"device {props['name'].decode()}; L2 {props['l2CacheSize'] / 2**20:.0f} MiB; CuPy {cp.__version__}; "
          f"copy bandwidth {bandwidth / 1e9:.0f} GB/s (read + written, benchmarks/loops.py copy_bandwidth)", flush=True)
    if "sweep" in args.parts:
        part_sweep(cp, args, bandwidth)
    if "plain" in args.parts:
        part_plain(cp, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
