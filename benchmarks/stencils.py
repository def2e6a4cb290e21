"""Stencils: per operator and per CG iteration, kfuse beside its peers in one run (GPU).

Per operator (lap7, lap27 at 64^3, 128^3, 256^3; float32 and float64): kfuse's stencil kernel,
CuPy's CSR mat-vec (cuSPARSE), torch.sparse CSR mat-vec (eager and torch.compile), the stencil
written with slicing in torch (eager, torch.compile default and reduce-overhead), and the traffic
limit: one read of u and one write of the result over the copy bandwidth measured in this run.
Per CG iteration (lap7 at 256^3 and 128^3, float64; lap27 at 128^3): kfuse's fused step in a
device loop (kfuse.fori_loop), CuPy's cupyx.scipy.sparse.linalg.cg, torch.compile's step written
with slicing (default and reduce-overhead), and the limit of 11 vector reads and writes over the
copy bandwidth (a hand-merged three-kernel step: stencil with p.Ap; x and r updates with r.r; p
update).  Times are medians of CUDA-event timings; every operator's result is checked against
float64 first.  Each peer runs in its own try: one that fails shows "-" and the reason.

    PYTHONPATH=src python benchmarks/stencils.py docs/results/stencils-H100.md [--quick]
"""
from __future__ import annotations

import argparse
import inspect
import statistics
import sys
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples" / "solvers"))


def timed(fn, repeats: int, warmup: int = 3) -> float:
    """Median seconds of ``fn()`` over ``repeats`` runs, by CUDA events on the current stream."""
    import cupy as cp
    for _ in range(warmup):
        fn()
    cp.cuda.Device().synchronize()
    out = []
    for _ in range(repeats):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(cp.cuda.get_elapsed_time(a, b) * 1e-3)
    return statistics.median(out)


def copy_bandwidth(dtype) -> float:
    """Bytes per second of a device-to-device copy of 2 GiB (read + write counted)."""
    import cupy as cp
    n = (1 << 30) // np.dtype(dtype).itemsize
    src, dst = cp.ones(n, dtype), cp.empty(n, dtype)
    t = timed(lambda: dst.__setitem__(Ellipsis, src), 10)
    return 2 * n * np.dtype(dtype).itemsize / t


def torch_stencil(op):
    """The operator written with slicing (zero boundary through a padded copy)."""
    import torch
    import torch.nn.functional as F

    def lap7(u):
        p = F.pad(u, (1, 1, 1, 1, 1, 1))
        return (6 * u - p[:-2, 1:-1, 1:-1] - p[2:, 1:-1, 1:-1] - p[1:-1, :-2, 1:-1] - p[1:-1, 2:, 1:-1]
                - p[1:-1, 1:-1, :-2] - p[1:-1, 1:-1, 2:])

    def lap27(u):
        p = F.pad(u, (1, 1, 1, 1, 1, 1))
        nz, ny, nx = u.shape
        box = sum(p[a:a + nz, b:b + ny, c:c + nx] for a in range(3) for b in range(3) for c in range(3))
        return 27 * u - box
    _ = torch
    return lap7 if op == "lap7" else lap27


def csr(op, shape, dtype):
    import poisson_cg
    return poisson_cg.scipy_matrix(op, shape).astype(dtype)


class Row:
    def __init__(self, label):
        self.label, self.cells, self.notes = label, {}, []

    def run(self, peer, fn):
        try:
            self.cells[peer] = fn()
        except Exception as e:      # noqa: BLE001 - a peer that cannot run is reported, not fatal
            self.cells[peer] = None
            self.notes.append(f"{peer}: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}")
            traceback.print_exc(limit=2)


def operator_rows(ops, sizes, dtypes, repeats):
    import cupy as cp
    import kfuse
    rows = []
    for dtype in dtypes:
        bw = copy_bandwidth(dtype)
        for op in ops:
            for n in sizes:
                shape = (n, n, n)
                row = Row(f"{op} {n}^3 {dtype}")
                rng = np.random.default_rng(0)
                host = rng.standard_normal(shape)
                u = cp.asarray(host, dtype=dtype)
                ref = getattr(kfuse.lib, op)(host)
                size = np.dtype(dtype).itemsize
                row.cells["limit"] = 2 * u.size * size / bw
                tol = 1e-4 if dtype == "float32" else 1e-12

                def check(got):
                    got = cp.asnumpy(got).reshape(shape).astype(np.float64)
                    err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
                    assert err <= tol, f"relative error {err:.1e}"

                def kf():
                    prog = kfuse.compile(f"vector u, w;\ninput u;\nw = {op}(u);\nreturn w;\n", dtype=dtype)
                    w = cp.empty(shape, dtype)
                    prog(u=u, out={"w": w})
                    check(w)
                    return timed(lambda: prog(u=u, out={"w": w}), repeats)
                row.run("kfuse", kf)

                def cusparse():
                    import cupyx.scipy.sparse as cps
                    A = cps.csr_matrix(csr(op, shape, dtype))
                    v = u.ravel()
                    check(A @ v)
                    return timed(lambda: A @ v, repeats)
                row.run("cuSPARSE (CuPy)", cusparse)

                def torch_sparse(compiled):
                    import torch
                    A = csr(op, shape, dtype)
                    At = torch.sparse_csr_tensor(torch.as_tensor(A.indptr, dtype=torch.int64),
                                                 torch.as_tensor(A.indices, dtype=torch.int64),
                                                 torch.as_tensor(A.data), size=A.shape, device="cuda")
                    v = torch.as_tensor(u.ravel(), device="cuda")
                    f = (lambda v: At @ v)
                    if compiled:
                        f = torch.compile(f)
                    check(cp.asarray(f(v)))
                    return timed(lambda: f(v), repeats)
                row.run("torch.sparse", lambda: torch_sparse(False))
                row.run("torch.sparse compile", lambda: torch_sparse(True))

                def torch_slices(mode):
                    import torch
                    f = torch_stencil(op)
                    if mode is not None:
                        f = torch.compile(f, mode=mode)
                    t = torch.as_tensor(u, device="cuda")
                    check(cp.asarray(f(t)))
                    return timed(lambda: f(t), repeats)
                row.run("torch slices", lambda: torch_slices(None))
                row.run("torch.compile slices", lambda: torch_slices("default"))
                row.run("torch.compile slices (reduce-overhead)", lambda: torch_slices("reduce-overhead"))
                rows.append(row)
                print(row.label, {k: (f"{v * 1e6:.1f} us" if v else "-") for k, v in row.cells.items()}, flush=True)
    return rows


def cg_rows(cases, iters, repeats):
    import cupy as cp
    import kfuse
    import poisson_cg
    rows = []
    for op, n, dtype in cases:
        shape = (n, n, n)
        row = Row(f"CG {op} {n}^3 {dtype}")
        size = np.dtype(dtype).itemsize
        bw = copy_bandwidth(dtype)
        row.cells["limit"] = 11 * n ** 3 * size / bw
        rng = np.random.default_rng(1)
        b = cp.asarray(rng.standard_normal(shape), dtype=dtype)

        def kf():
            x, r, bb = poisson_cg._start(b)
            state = (x, r, r.copy(), bb)

            def run():
                return kfuse.fori_loop(0, iters, lambda i, s: poisson_cg.cg_update(op, *s), state)
            run()
            return timed(run, repeats, warmup=1) / iters
        row.run("kfuse", kf)

        def cupy_cg():
            import cupyx.scipy.sparse as cps
            import cupyx.scipy.sparse.linalg as cpl
            A = cps.csr_matrix(csr(op, shape, dtype))
            v = b.ravel()
            kw = {"rtol" if "rtol" in inspect.signature(cpl.cg).parameters else "tol": 0}   # CuPy 14 names it rtol
            return timed(lambda: cpl.cg(A, v, maxiter=iters, **kw), repeats, warmup=1) / iters
        row.run("CuPy cg (cuSPARSE)", cupy_cg)

        def torch_loop(mode):
            import torch
            lap = torch_stencil(op)

            def step(x, r, p, rr):
                q = lap(p)
                alpha = rr / torch.sum(p * q)
                x = x + alpha * p
                r = r - alpha * q
                rr2 = torch.sum(r * r)
                return x, r, r + (rr2 / rr) * p, rr2
            f = torch.compile(step, mode=mode)
            bt = torch.as_tensor(b, device="cuda")
            s = (torch.zeros_like(bt), bt.clone(), bt.clone(), torch.sum(bt * bt))

            def run():
                t = s
                for _ in range(iters):
                    if mode == "reduce-overhead":    # a CUDA graph's outputs are overwritten by its next replay
                        torch.compiler.cudagraph_mark_step_begin()
                        t = tuple(y.clone() for y in f(*t))
                    else:
                        t = f(*t)
                return t
            return timed(run, repeats, warmup=1) / iters
        row.run("torch.compile slices", lambda: torch_loop("default"))
        row.run("torch.compile slices (reduce-overhead)", lambda: torch_loop("reduce-overhead"))
        rows.append(row)
        print(row.label, {k: (f"{v * 1e6:.1f} us" if v else "-") for k, v in row.cells.items()}, flush=True)
    return rows


def table(title, rows) -> list[str]:
    peers = list(dict.fromkeys(p for r in rows for p in r.cells))
    out = [f"## {title}", "", "| case | " + " | ".join(f"{p} (us)" for p in peers) + " | kfuse / limit |",
           "| --- | " + " | ".join("---:" for _ in peers) + " | ---: |"]
    for r in rows:
        cells = [f"{r.cells[p] * 1e6:.1f}" if r.cells.get(p) else "-" for p in peers]
        k, lim = r.cells.get("kfuse"), r.cells.get("limit")
        out.append(f"| {r.label} | " + " | ".join(cells) + f" | {k / lim:.2f} |" if k and lim else
                   f"| {r.label} | " + " | ".join(cells) + " | - |")
    notes = [f"* {r.label}: {n}" for r in rows for n in r.notes]
    return out + ([""] + notes if notes else []) + [""]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="markdown file to write")
    ap.add_argument("--quick", action="store_true", help="64^3 and 128^3 operators, fewer repeats")
    ap.add_argument("--ops", default="lap7,lap27", help="operators of the operator table (default lap7,lap27)")
    ap.add_argument("--sizes", default=None, help="grid sides of the operator table (default 64,128,256; quick 64,128)")
    ap.add_argument("--cg", default=None, help="CG cases OP:SIDE:DTYPE,... (default lap7:128:float64,"
                    "lap7:256:float64,lap27:128:float64; quick the first)")
    args = ap.parse_args(argv)
    import cupy as cp
    sizes = tuple(int(n) for n in args.sizes.split(",")) if args.sizes else (64, 128) if args.quick else (64, 128, 256)
    repeats = 10 if args.quick else 30
    t0 = time.time()
    ops = operator_rows(tuple(args.ops.split(",")), sizes, ("float32", "float64"), repeats)
    cg_cases = ([(op, int(side), dt) for op, side, dt in (c.split(":") for c in args.cg.split(","))] if args.cg else
                [("lap7", 128, "float64")] + ([] if args.quick else [("lap7", 256, "float64"),
                                                                      ("lap27", 128, "float64")]))
    cgs = cg_rows(cg_cases, 20 if args.quick else 50, 3 if args.quick else 5)
    name = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    lines = [f"# Stencils on {name}", "",
             "Medians of CUDA-event timings, microseconds (per operator application; per CG iteration). "
             "`limit`: one read of each input and one write of each output over the copy bandwidth "
             "measured in this run (operator: 2 vectors; CG: 11 vectors).", ""]
    lines += table("Operators", ops) + table("CG iterations", cgs)
    lines.append(f"Run took {time.time() - t0:.0f} s (`python benchmarks/stencils.py {' '.join(argv or sys.argv[1:])}`).")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
