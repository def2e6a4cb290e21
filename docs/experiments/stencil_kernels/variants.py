"""Experiment (issue 58): how close can a 3-D Laplacian get to its traffic limit on this GPU, and
with which mapping?  Standalone kernels beside kfuse's own, in one run.

Operators (zero boundary, u of nz x ny x nx, x fastest; lap5 of ny x nx):
  lap5   out = 4 u - (the 4 axis neighbours)
  lap7   out = 6 u - (the 6 axis neighbours)
  lap27  out = 27 u - (the 3x3x3 box around the point, the point included)

Variants:
  kfuse        kfuse's stencil kernel (a compiled script ``w = lap7(u)``; instances of 32
               consecutive entries, 8 threads of 4 entries; neighbours from L1/L2)
  point        a thread a point, blocks of 32 x 8 (x, y), a plane of blocks per z; neighbours
               through the read-only cache
  zmarch{Z}    a thread a column (x, y) of Z consecutive planes: u at z-1, z, z+1 kept in registers
               (one global read of each plane), x and y neighbours through the read-only cache
  smem{Z}      as zmarch, the x and y neighbours from a shared tile of the plane (2.5-D blocking)
  quad{Z}      as zmarch, a thread 4 consecutive x entries (16-byte loads of the row and the rows
               y +- 1), x +- 1 from the neighbouring lanes by shuffles
lap27 takes kfuse, point and zmarch{Z} (each plane's 3x3 box sums made once and kept for the
planes above and below); lap5 kfuse, point and zmarch{Z} (a thread a column of Z rows).

Times: GPU time per application, medians of CUDA-event timings of a CUDA graph of 20 applications
(host launch cost left out: what a device loop sees), L2 warm from the application before.
``limit``: one read of u and one write of the result over the copy bandwidth measured in this run
(a 1 GiB device-to-device copy).  Every variant is checked against a float64 NumPy reference on a
grid of odd sizes first and on each timed grid.

    PYTHONPATH=src python docs/experiments/stencil_kernels/variants.py OUT.md [--sizes 128 256]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

KERNELS = r"""
// ---- lap7 -----------------------------------------------------------------------------------
extern "C" __global__ void __launch_bounds__(256) lap7_point(const real* __restrict__ u, real* __restrict__ w,
                                                             int nx, int ny, int nz) {
    const int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 8 + threadIdx.y, z = blockIdx.z;
    if (x >= nx || y >= ny) return;
    const long long plane = (long long)nx * ny, e = z * plane + (long long)y * nx + x;
    real s = real(6) * __ldg(u + e);
    if (x > 0) s -= __ldg(u + e - 1);
    if (x + 1 < nx) s -= __ldg(u + e + 1);
    if (y > 0) s -= __ldg(u + e - nx);
    if (y + 1 < ny) s -= __ldg(u + e + nx);
    if (z > 0) s -= __ldg(u + e - plane);
    if (z + 1 < nz) s -= __ldg(u + e + plane);
    w[e] = s;
}

extern "C" __global__ void __launch_bounds__(256) lap7_zmarch(const real* __restrict__ u, real* __restrict__ w,
                                                              int nx, int ny, int nz, int Z) {
    const int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 8 + threadIdx.y;
    const int z0 = blockIdx.z * Z, z1 = min(z0 + Z, nz);
    if (x >= nx || y >= ny) return;
    const long long plane = (long long)nx * ny;
    long long e = z0 * plane + (long long)y * nx + x;
    real below = z0 > 0 ? __ldg(u + e - plane) : real(0), cur = __ldg(u + e);
    for (int z = z0; z < z1; ++z, e += plane) {
        const real above = z + 1 < nz ? __ldg(u + e + plane) : real(0);
        real s = real(6) * cur - below - above;
        if (x > 0) s -= __ldg(u + e - 1);
        if (x + 1 < nx) s -= __ldg(u + e + 1);
        if (y > 0) s -= __ldg(u + e - nx);
        if (y + 1 < ny) s -= __ldg(u + e + nx);
        w[e] = s;
        below = cur;
        cur = above;
    }
}

extern "C" __global__ void __launch_bounds__(256) lap7_smem(const real* __restrict__ u, real* __restrict__ w,
                                                            int nx, int ny, int nz, int Z) {
    __shared__ real t[8 + 2][32 + 2];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int x = blockIdx.x * 32 + tx, y = blockIdx.y * 8 + ty;
    const int z0 = blockIdx.z * Z, z1 = min(z0 + Z, nz);
    const bool in = x < nx && y < ny;
    const long long plane = (long long)nx * ny;
    long long e = z0 * plane + (long long)(in ? y : 0) * nx + (in ? x : 0);
    real below = in && z0 > 0 ? __ldg(u + e - plane) : real(0), cur = in ? __ldg(u + e) : real(0);
    for (int z = z0; z < z1; ++z, e += plane) {
        const real above = in && z + 1 < nz ? __ldg(u + e + plane) : real(0);
        t[ty + 1][tx + 1] = cur;
        if (tx == 0) t[ty + 1][0] = in && x > 0 ? __ldg(u + e - 1) : real(0);
        if (tx == 31) t[ty + 1][33] = in && x + 1 < nx ? __ldg(u + e + 1) : real(0);
        if (ty == 0) t[0][tx + 1] = in && y > 0 ? __ldg(u + e - nx) : real(0);
        if (ty == 7) t[9][tx + 1] = in && y + 1 < ny ? __ldg(u + e + nx) : real(0);
        __syncthreads();
        if (in)
            w[e] = real(6) * cur - below - above - t[ty + 1][tx] - t[ty + 1][tx + 2] - t[ty][tx + 1] - t[ty + 2][tx + 1];
        __syncthreads();
        below = cur;
        cur = above;
    }
}

// 4 consecutive entries at p (16-byte aligned: nx a multiple of 4, x a multiple of 4)
__device__ __forceinline__ void ld4(const real* p, real (&q)[4]) {
#if REAL_IS_DOUBLE
    const double2 a = __ldg(reinterpret_cast<const double2*>(p)), b = __ldg(reinterpret_cast<const double2*>(p) + 1);
    q[0] = a.x; q[1] = a.y; q[2] = b.x; q[3] = b.y;
#else
    const float4 a = __ldg(reinterpret_cast<const float4*>(p));
    q[0] = a.x; q[1] = a.y; q[2] = a.z; q[3] = a.w;
#endif
}

__device__ __forceinline__ void st4(real* p, const real (&q)[4]) {
#if REAL_IS_DOUBLE
    reinterpret_cast<double2*>(p)[0] = make_double2(q[0], q[1]);
    reinterpret_cast<double2*>(p)[1] = make_double2(q[2], q[3]);
#else
    *reinterpret_cast<float4*>(p) = make_float4(q[0], q[1], q[2], q[3]);
#endif
}

// blocks of 32 x 8 threads: 128 x entries, 8 rows; nx a multiple of 4
extern "C" __global__ void __launch_bounds__(256) lap7_quad(const real* __restrict__ u, real* __restrict__ w,
                                                            int nx, int ny, int nz, int Z) {
    const int lane = threadIdx.x, x = (blockIdx.x * 32 + lane) * 4, y = blockIdx.y * 8 + threadIdx.y;
    const int z0 = blockIdx.z * Z, z1 = min(z0 + Z, nz);
    const bool in = x < nx && y < ny;
    const unsigned all = 0xffffffffu;
    const long long plane = (long long)nx * ny;
    long long e = z0 * plane + (long long)(in ? y : 0) * nx + (in ? x : 0);
    real below[4] = {0, 0, 0, 0}, cur[4] = {0, 0, 0, 0}, above[4], q[4], s[4];
    if (in && z0 > 0) ld4(u + e - plane, below);
    if (in) ld4(u + e, cur);
    for (int z = z0; z < z1; ++z, e += plane) {
#pragma unroll
        for (int k = 0; k < 4; ++k) above[k] = real(0);
        if (in && z + 1 < nz) ld4(u + e + plane, above);
#pragma unroll
        for (int k = 0; k < 4; ++k) s[k] = real(6) * cur[k] - below[k] - above[k];
        // x - 1 and x + 4: the neighbouring lanes' ends (a warp's first and last lane read them)
        real left = __shfl_up_sync(all, cur[3], 1), right = __shfl_down_sync(all, cur[0], 1);
        if (lane == 0) left = in && x > 0 ? __ldg(u + e - 1) : real(0);
        if (lane == 31 || x + 4 >= nx) right = in && x + 4 < nx ? __ldg(u + e + 4) : real(0);
        s[0] -= left + cur[1];
        s[1] -= cur[0] + cur[2];
        s[2] -= cur[1] + cur[3];
        s[3] -= cur[2] + right;
        if (in && y > 0) {
            ld4(u + e - nx, q);
#pragma unroll
            for (int k = 0; k < 4; ++k) s[k] -= q[k];
        }
        if (in && y + 1 < ny) {
            ld4(u + e + nx, q);
#pragma unroll
            for (int k = 0; k < 4; ++k) s[k] -= q[k];
        }
        if (in) st4(w + e, s);
#pragma unroll
        for (int k = 0; k < 4; ++k) { below[k] = cur[k]; cur[k] = above[k]; }
    }
}

// ---- lap5 (2-D, ny x nx) ---------------------------------------------------------------------
extern "C" __global__ void __launch_bounds__(256) lap5_point(const real* __restrict__ u, real* __restrict__ w,
                                                             int nx, int ny, int nz) {
    const int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 8 + threadIdx.y;
    if (x >= nx || y >= ny) return;
    const long long e = (long long)y * nx + x;
    real s = real(4) * __ldg(u + e);
    if (x > 0) s -= __ldg(u + e - 1);
    if (x + 1 < nx) s -= __ldg(u + e + 1);
    if (y > 0) s -= __ldg(u + e - nx);
    if (y + 1 < ny) s -= __ldg(u + e + nx);
    w[e] = s;
}

// a thread a column x of Z consecutive rows: u at y-1, y, y+1 in registers
extern "C" __global__ void __launch_bounds__(256) lap5_zmarch(const real* __restrict__ u, real* __restrict__ w,
                                                              int nx, int ny, int nz, int Z) {
    const int x = blockIdx.x * 256 + threadIdx.x + 32 * threadIdx.y;
    const int y0 = blockIdx.y * Z, y1 = min(y0 + Z, ny);
    if (x >= nx) return;
    long long e = (long long)y0 * nx + x;
    real below = y0 > 0 ? __ldg(u + e - nx) : real(0), cur = __ldg(u + e);
    for (int y = y0; y < y1; ++y, e += nx) {
        const real above = y + 1 < ny ? __ldg(u + e + nx) : real(0);
        real s = real(4) * cur - below - above;
        if (x > 0) s -= __ldg(u + e - 1);
        if (x + 1 < nx) s -= __ldg(u + e + 1);
        w[e] = s;
        below = cur;
        cur = above;
    }
}

// ---- lap27 ----------------------------------------------------------------------------------
__device__ __forceinline__ real box9(const real* __restrict__ u, long long e, int x, int y, int nx, int ny) {
    // the 3 x 3 sum in the plane of entry e around (x, y), zero past the edges
    real s = real(0);
#pragma unroll
    for (int dy = -1; dy <= 1; ++dy) {
        if (y + dy < 0 || y + dy >= ny) continue;
        const long long r = e + (long long)dy * nx;
        s += __ldg(u + r);
        if (x > 0) s += __ldg(u + r - 1);
        if (x + 1 < nx) s += __ldg(u + r + 1);
    }
    return s;
}

extern "C" __global__ void __launch_bounds__(256) lap27_point(const real* __restrict__ u, real* __restrict__ w,
                                                              int nx, int ny, int nz) {
    const int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 8 + threadIdx.y, z = blockIdx.z;
    if (x >= nx || y >= ny) return;
    const long long plane = (long long)nx * ny, e = z * plane + (long long)y * nx + x;
    real box = box9(u, e, x, y, nx, ny);
    if (z > 0) box += box9(u, e - plane, x, y, nx, ny);
    if (z + 1 < nz) box += box9(u, e + plane, x, y, nx, ny);
    w[e] = real(27) * __ldg(u + e) - box;
}

extern "C" __global__ void __launch_bounds__(256) lap27_zmarch(const real* __restrict__ u, real* __restrict__ w,
                                                               int nx, int ny, int nz, int Z) {
    const int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 8 + threadIdx.y;
    const int z0 = blockIdx.z * Z, z1 = min(z0 + Z, nz);
    if (x >= nx || y >= ny) return;
    const long long plane = (long long)nx * ny;
    long long e = z0 * plane + (long long)y * nx + x;
    real below = z0 > 0 ? box9(u, e - plane, x, y, nx, ny) : real(0), cur = box9(u, e, x, y, nx, ny);
    for (int z = z0; z < z1; ++z, e += plane) {
        const real above = z + 1 < nz ? box9(u, e + plane, x, y, nx, ny) : real(0);
        w[e] = real(27) * __ldg(u + e) - (below + cur + above);
        below = cur;
        cur = above;
    }
}
"""


def source(dtype: str) -> str:
    real = "double" if dtype == "float64" else "float"
    return f"typedef {real} real;\n#define REAL_IS_DOUBLE {int(real == 'double')}\n" + KERNELS


def reference(op: str, u: np.ndarray) -> np.ndarray:
    """Float64 NumPy: the operator with zero boundary."""
    u = u.astype(np.float64)
    p = np.pad(u, 1)
    if op == "lap5":
        return 4 * u - p[:-2, 1:-1] - p[2:, 1:-1] - p[1:-1, :-2] - p[1:-1, 2:]
    nz, ny, nx = u.shape
    if op == "lap7":
        return (6 * u - p[:-2, 1:-1, 1:-1] - p[2:, 1:-1, 1:-1] - p[1:-1, :-2, 1:-1] - p[1:-1, 2:, 1:-1]
                - p[1:-1, 1:-1, :-2] - p[1:-1, 1:-1, 2:])
    box = sum(p[a:a + nz, b:b + ny, c:c + nx] for a in range(3) for b in range(3) for c in range(3))
    return 27 * u - box


def variants(op: str, module, shape, zs) -> dict:
    """name -> launch(u, w) of the standalone kernels that take this grid."""
    i32 = np.int32
    out = {}
    if op == "lap5":
        ny, nx = shape
        point = module.get_function("lap5_point")
        out["point"] = lambda u, w: point(((nx + 31) // 32, (ny + 7) // 8, 1), (32, 8, 1), (u, w, i32(nx), i32(ny), i32(1)))
        march = module.get_function("lap5_zmarch")
        for Z in zs:
            grid = ((nx + 255) // 256, (ny + Z - 1) // Z, 1)
            out[f"zmarch{Z}"] = (lambda g, Z: lambda u, w: march(g, (32, 8, 1), (u, w, i32(nx), i32(ny), i32(1), i32(Z))))(grid, Z)
        return out
    nz, ny, nx = shape
    point = module.get_function(f"{op}_point")
    out["point"] = lambda u, w: point(((nx + 31) // 32, (ny + 7) // 8, nz), (32, 8, 1), (u, w, i32(nx), i32(ny), i32(nz)))
    for Z in zs:
        march = module.get_function(f"{op}_zmarch")
        grid = ((nx + 31) // 32, (ny + 7) // 8, (nz + Z - 1) // Z)
        out[f"zmarch{Z}"] = (lambda f, g, Z: lambda u, w: f(g, (32, 8, 1), (u, w, i32(nx), i32(ny), i32(nz), i32(Z))))(march, grid, Z)
        if op == "lap7":
            smem = module.get_function("lap7_smem")
            out[f"smem{Z}"] = (lambda f, g, Z: lambda u, w: f(g, (32, 8, 1), (u, w, i32(nx), i32(ny), i32(nz), i32(Z))))(smem, grid, Z)
            if nx % 4 == 0:
                quad = module.get_function("lap7_quad")
                qgrid = ((nx // 4 + 31) // 32, (ny + 7) // 8, (nz + Z - 1) // Z)
                out[f"quad{Z}"] = (lambda f, g, Z: lambda u, w: f(g, (32, 8, 1), (u, w, i32(nx), i32(ny), i32(nz), i32(Z))))(quad, qgrid, Z)
    return out


def kfuse_launch(op: str, dtype: str):
    import kfuse
    prog = kfuse.compile(f"vector u, w;\ninput u;\nw = {op}(u);\nreturn w;\n", dtype=dtype)
    return lambda u, w: prog(u=u, out={"w": w})


def graph_us(launch, u, w, reps: int, per_graph: int = 20) -> float:
    """Median microseconds per launch: CUDA graphs of ``per_graph`` launches, CUDA-event timed."""
    import cupy as cp
    launch(u, w)                    # binds (kfuse), compiles, warms L2
    cp.cuda.Device().synchronize()
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        s.begin_capture()
        for _ in range(per_graph):
            launch(u, w)
        g = s.end_capture()
    times = []
    for _ in range(reps + 2):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record(s)
        g.launch(s)
        b.record(s)
        b.synchronize()
        times.append(cp.cuda.get_elapsed_time(a, b) * 1e3 / per_graph)
    return statistics.median(times[2:])


def copy_bandwidth() -> float:
    import cupy as cp
    a = cp.ones(2**27, cp.float64)
    b = cp.empty_like(a)
    us = graph_us(lambda x, y: y.__setitem__(Ellipsis, x), a, b, 10, per_graph=5)
    return 2 * a.nbytes / (us * 1e-6)


def check(name, launch, u, ref, tol, failures) -> bool:
    import cupy as cp
    w = cp.full(u.shape, cp.nan, u.dtype)
    launch(u, w)
    got = cp.asnumpy(w).astype(np.float64)
    err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    if not err <= tol:
        failures.append(f"{name} {u.shape} {u.dtype}: relative error {err:.2e}")
        return False
    return True


def main() -> int:
    import cupy as cp
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--sizes", type=int, nargs="+", default=[128, 256])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "float64"])
    ap.add_argument("--sizes2d", type=int, nargs="+", default=[4096])
    ap.add_argument("--ops", nargs="+", default=["lap7", "lap27", "lap5"])
    ap.add_argument("--z", type=int, nargs="+", default=[4, 8, 16, 32])
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    t0 = time.time()
    bw = copy_bandwidth()
    lines = [f"# Stencil kernels ({cp.cuda.runtime.getDeviceProperties(0)['name'].decode()})", "",
             f"copy bandwidth {bw / 1e9:.0f} GB/s; GPU time per application (graphs of 20), us; "
             f"`python {' '.join(sys.argv)}`", ""]
    failures: list[str] = []
    rng = np.random.default_rng(58)
    for dtype in args.dtypes:
        module = cp.RawModule(code=source(dtype), options=("-std=c++17",))
        tol = 1e-5 if dtype == "float32" else 1e-13
        for op in args.ops:
            smalls = ((29, 37), (3, 36), (1, 40), (300, 4)) if op == "lap5" else \
                ((23, 29, 37), (5, 3, 36), (1, 1, 40), (17, 9, 4))
            for small in smalls:        # odd grids first
                host = rng.standard_normal(small)
                u = cp.asarray(host, dtype)
                ref = reference(op, host)
                launches = dict(variants(op, module, small, args.z), kfuse=kfuse_launch(op, dtype))
                for name, launch in launches.items():
                    check(f"{op} {name}", launch, u, ref, tol, failures)
            for n in (args.sizes2d if op == "lap5" else args.sizes):
                shape = (n, n) if op == "lap5" else (n, n, n)
                host = rng.standard_normal(shape)
                u = cp.asarray(host, dtype)
                ref = reference(op, host)
                limit = 2 * u.nbytes / bw * 1e6
                row = {}
                launches = dict(kfuse=kfuse_launch(op, dtype), **variants(op, module, shape, args.z))
                for name, launch in launches.items():
                    w = cp.empty_like(u)
                    if check(f"{op} {name}", launch, u, ref, tol, failures):
                        row[name] = graph_us(launch, u, w, args.reps)
                del u
                best = min(row, key=row.get)
                lines.append(f"## {op} {n}^{len(shape)} {dtype}: limit {limit:.1f} us, best {best} {row[best]:.1f} "
                             f"({row[best] / limit:.2f}x), kfuse {row.get('kfuse', float('nan')):.1f} "
                             f"({row.get('kfuse', float('nan')) / limit:.2f}x)")
                lines.append("")
                lines.append("| variant | us | / limit |")
                lines.append("| --- | ---: | ---: |")
                lines += [f"| {k} | {v:.1f} | {v / limit:.2f} |" for k, v in sorted(row.items(), key=lambda kv: kv[1])]
                lines.append("")
                print("\n".join(lines[-len(row) - 4:]), flush=True)
    lines.append("Checks: " + ("all variants matched float64 NumPy" if not failures else "FAILED: " + "; ".join(failures)))
    lines.append(f"Run took {time.time() - t0:.0f} s.")
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(lines[-2])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
