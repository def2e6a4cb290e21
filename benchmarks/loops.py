"""Iterative methods, microseconds per iteration: kfuse's device loops (``kfuse.fori_loop``, and
``kfuse.while_loop`` for the solvers), kfuse's plain loop (a jitted step fed back from Python, with
CuPy arrays and with torch tensors), the jitted step inside a torch.compile'd step, torch eager,
torch.compile (default, the step fed back), torch.compile mode="reduce-overhead" over ``--unroll``
steps unrolled into one CUDA graph, and CuPy's ``cupyx.scipy.sparse.linalg.cg``, side by side in
one run.  Two methods return scalar arithmetic from their step: Lanczos (a square root) and
steepest descent (a quotient of two dot products).

Each method is one Python function over operators, run unchanged by every contender and by NumPy
in float64 (the reference: each contender's final iterate is compared with it after the same
steps).  Times are CUDA-event medians of ``--reps`` runs of ``--steps`` steps after a warm-up run
(which also compiles); the device-to-device copy bandwidth is measured in the same run, and
"A limit" is the matrix traffic of one iteration (the passes over A that a step needs) over it.

    PYTHONPATH=src python3 benchmarks/loops.py out.md
    PYTHONPATH=src python3 benchmarks/loops.py out.md --sizes 1024 --dtypes float32 --methods cg power
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import kfuse


# -- the methods: one step each, over operators (the solvers' updates are the examples') ------------------
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples" / "solvers"))
from bicg import bicg_update            # noqa: E402 - the examples folder is no package
from bicgstab import bicgstab_update    # noqa: E402
from cg import cg_update                # noqa: E402
import solvers                          # noqa: E402 - benchmarks/solvers.py: its CuPy event adapter


def cg(A, x, r, p, rr):
    return (A, *cg_update(A, x, r, p, rr))


def bicg(A, x, r, rt, p, pt, rho):
    return (A, *bicg_update(A, x, r, rt, p, pt, rho))


def bicgstab(A, x, r, r0, p, rho):
    x, r, p, rho = bicgstab_update(A, x, r, r0, p, rho)
    return A, x, r, r0, p, rho


def power(A, x, lam):
    """Power iteration, normalised; lam is the Rayleigh quotient of the iterate before."""
    y = A @ x
    return A, y / kfuse.sqrt(y @ y), x @ y


def lsq(A, b, x, eta):
    """Gradient descent on ||A x - b||^2 / 2."""
    return A, b, x - eta * (A.T @ (A @ x - b)), eta


def lanczos(A, v, v_prev, beta):
    """A Lanczos step (symmetric A): the next basis vector and beta, a returned square root."""
    w = A @ v - beta * v_prev
    w = w - (w @ v) * v
    beta_new = kfuse.sqrt(w @ w)
    return A, w / beta_new, v, beta_new


def sd(A, b, x, r, rq):
    """Steepest descent (symmetric positive definite A); rq, the Rayleigh quotient r.Ar / r.r of
    the residual, is returned as scalar arithmetic (the reciprocal of the step length)."""
    q = A @ r
    rr, rq_new = r @ r, r @ q
    alpha = rr / rq_new
    return A, b, x + alpha * r, r - alpha * q, rq_new / rr


# (step, passes over A, symmetric A, eigenvalue spread: none reaches rounding in the 30 steps timed)
METHODS = {"cg": (cg, 1, True, 1e2), "bicg": (bicg, 1, False, 1e2), "bicgstab": (bicgstab, 2, False, 1e4),
           "power": (power, 1, True, 1e2), "lsq": (lsq, 2, False, 1e2), "lanczos": (lanczos, 1, True, 1e2),
           "sd": (sd, 1, True, 1e2)}
RESULT = {"lsq": 2, "sd": 2}                        # the state entry compared with NumPy (else entry 1)
SOLVERS = {"cg": 4, "bicg": 6, "bicgstab": 5}       # the state entry the while loop's condition reads


def problem(method: str, n: int, dtype: str, xp, seed: int = 0):
    """The matrix and initial state of a method, as ``xp`` arrays (float64 NumPy for the reference)."""
    spread = METHODS[method][3]
    rng = np.random.default_rng(seed)
    R = rng.standard_normal((n, n))
    if METHODS[method][2]:
        R = (R + R.T) / np.sqrt(2.0)
    A = ((spread - 1.0) / 4.0 / np.sqrt(n)) * R + np.eye(n) * (spread + 1.0) / 2.0
    b = rng.standard_normal(n)
    A, b = A.astype(dtype).astype(np.float64), b.astype(dtype).astype(np.float64)
    z = np.zeros(n)
    bb = np.array(b @ b)
    init = {"cg": (A, z, b, b, bb), "bicg": (A, z, b, b, b, b, bb), "bicgstab": (A, z, b, b, b, bb),
            "power": (A, b / np.sqrt(bb), np.array(0.0)),
            "lsq": (A, b, z, np.array(1.0 / (1.5 * spread) ** 2)),
            "lanczos": (A, b / np.sqrt(bb), z, np.array(0.0)), "sd": (A, b, z, b, np.array(1.0))}[method]
    return tuple(xp(v, dtype) for v in init)


def reference(method: str, state, steps: int) -> np.ndarray:
    step = METHODS[method][0]
    for _ in range(steps):
        state = step(*state)
    return state[RESULT.get(method, 1)]


def prices(method: str, n: int, dtype: str) -> dict:
    """The model's prices of a method's step at n (us; no GPU needed): the plain call's prediction
    (the plan's, as ``kfuse plan`` gives it) and the device-loop step's (``cost/queued.py``, as
    ``kfuse.explain_loop`` gives it), and the plan's kernels."""
    from kfuse.cost.queued import step_price
    shapes = [np.shape(v) for v in problem(method, 4, "float64", lambda v, d: np.asarray(v))]
    state = [np.zeros(tuple(n for _ in shape), dtype) for shape in shapes]      # shapes only are read
    c = kfuse.jit(METHODS[method][0]).compile(*state)
    s = c.search
    step = step_price(s.model, c.kernels, s.dims, s.entries, s.itemsize)
    return {"plain call": c.plan.predicted * 1e6, "device loop step": step.seconds * 1e6, "kernels": len(c.kernels)}


# -- contenders: each returns a function running ``steps`` steps from a state ------------------------------
def kfuse_plain(method):
    jitted = kfuse.jit(METHODS[method][0])

    def run(state, steps):
        for _ in range(steps):
            state = jitted(*state)
        return state
    return run


def kfuse_in_torch_compile(method):
    """The jitted step inside a torch.compile'd step (fullgraph: one kfuse::call node), fed back."""
    import torch
    _dynamo()
    jitted = kfuse.jit(METHODS[method][0])
    step = torch.compile(lambda *s: jitted(*s), dynamic=False, fullgraph=True)

    def run(state, steps):
        for _ in range(steps):
            state = step(*state)
        return state
    return run


def _mode(run, mode: str):
    """``run`` with device loops made as ``mode`` says (runtime/persistent.py: on, off)."""
    from kfuse.runtime import persistent

    def wrapped(state, steps):
        old, persistent.MODE = persistent.MODE, mode
        try:
            return run(state, steps)
        finally:
            persistent.MODE = old
    return wrapped


def kfuse_fori(method, mode: str = "off"):
    step = METHODS[method][0]
    return _mode(lambda state, steps: kfuse.fori_loop(0, steps, lambda i, s: step(*s), state), mode)


def kfuse_while(method, mode: str = "off"):
    """The condition always holds (a NaN too): ``steps`` steps, checked on the device after each."""
    step, k = METHODS[method][0], SOLVERS[method]

    def run(state, steps):
        s = kfuse.while_loop(lambda s: ~(abs(s[k]) < 0.0), lambda s: step(*s), state, max_iterations=steps)
        if s.iterations != steps:
            raise RuntimeError(f"{s.iterations} steps taken, {steps} asked for")
        return s
    return _mode(run, mode)


def torch_eager(method):
    step = METHODS[method][0]

    def run(state, steps):
        for _ in range(steps):
            state = step(*state)
        return state
    return run


def _dynamo():
    import torch._dynamo
    for name in ("cache_size_limit", "recompile_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, max(256, getattr(torch._dynamo.config, name)))


def torch_compiled(method):
    import torch
    _dynamo()
    step = torch.compile(METHODS[method][0], dynamic=False, fullgraph=True)

    def run(state, steps):
        for _ in range(steps):
            state = step(*state)
        return state
    return run


def torch_unrolled(method, unroll: int):
    """torch.compile(mode="reduce-overhead") of ``unroll`` steps in a Python loop: one CUDA graph."""
    import torch
    _dynamo()
    step = METHODS[method][0]

    def unrolled(*state):
        for _ in range(unroll):
            state = step(*state)
        return state
    compiled = torch.compile(unrolled, mode="reduce-overhead", dynamic=False, fullgraph=True)

    def run(state, steps):
        assert steps % unroll == 0
        for _ in range(steps // unroll):
            torch.compiler.cudagraph_mark_step_begin()
            state = tuple(v.clone() for v in compiled(*state))      # outputs outlive the next replay
        return state
    return run


def cupy_cg(method):
    import cupyx.scipy.sparse.linalg as sla

    def run(state, steps):
        A, x, r, p, rr = state
        try:
            x, _ = sla.cg(A, r, x0=x, rtol=0.0, atol=0.0, maxiter=steps)
        except TypeError:                   # CuPy before rtol
            x, _ = sla.cg(A, r, x0=x, tol=0.0, atol=0.0, maxiter=steps)
        return (A, x)
    return run


# -- timing ------------------------------------------------------------------------------------------------
def copy_bandwidth(cp) -> float:
    """Device-to-device copy, bytes read plus written per second (median of 20, 256 MiB)."""
    a = cp.empty(2**26, np.float32)
    b = cp.empty_like(a)
    times = []
    for _ in range(21):
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        e0.record()
        b[...] = a
        e1.record()
        e1.synchronize()
        times.append(cp.cuda.get_elapsed_time(e0, e1) / 1e3)
    return 2 * a.nbytes / statistics.median(times[1:])


def timed(run, state, steps: int, reps: int, events, check: int) -> tuple[float, object]:
    """(median us per step of ``reps`` runs of ``steps`` steps, the state after ``check`` steps)."""
    checked = run(state, check)
    run(state, steps)                          # warm-up: compiles, captures
    times = []
    for _ in range(reps):
        e0, e1, sync = events()
        sync()
        e0.record()
        run(state, steps)
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1e3 / steps)      # us per iteration
    return statistics.median(times), checked


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="markdown file to write (a .json beside it)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1024, 4096, 16384])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "float64"])
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    ap.add_argument("--steps", type=int, default=120, help="steps per timed run")
    ap.add_argument("--check", type=int, default=30, help="steps before the comparison with NumPy (none of the "
                    "methods reaches rounding in 30: BiCGSTAB in float32 breaks down after about 40)")
    ap.add_argument("--unroll", type=int, default=30, help="steps per torch.compile reduce-overhead graph")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--peers", nargs="*", default=["eager", "compile", "unrolled", "cupy"])
    ap.add_argument("--kfuse", nargs="*", default=["modes", "while", "plain", "torch.compile"],
                    help="kfuse contenders beside the device loop (default settings: graphs): the loop as one "
                    "persistent kernel (modes), the while loop, the plain loop (CuPy arrays, and torch tensors), "
                    "the jitted step inside a torch.compile'd step (torch.compile)")
    args = ap.parse_args(argv)
    if "unrolled" in args.peers and args.steps % args.unroll:
        ap.error(f"--steps {args.steps} is not a multiple of --unroll {args.unroll}")
    import cupy as cp
    try:
        import torch
    except ImportError:
        torch = None

    def cupy_events():
        return (*solvers.cupy_events(), cp.cuda.get_current_stream().synchronize)

    def torch_events():
        return (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True),
                torch.cuda.synchronize)

    bandwidth = copy_bandwidth(cp)
    print(f"copy bandwidth {bandwidth / 1e9:.0f} GB/s", file=sys.stderr)
    rows = []
    for dtype in args.dtypes:
        for n in args.sizes:
            for method in args.methods:
                passes = METHODS[method][1]
                row = {"method": method, "dtype": dtype, "n": n, "us": {}, "err": {}, "note": {},
                       "limit": passes * n * n * np.dtype(dtype).itemsize / bandwidth * 1e6,
                       "price": prices(method, n, dtype)}
                ref = reference(method, problem(method, n, "float64", lambda v, d: np.asarray(v, np.float64)),
                                args.check)
                contenders = [("kfuse device loop", kfuse_fori, "cupy")]
                if "modes" in args.kfuse:
                    contenders += [("kfuse device loop, persistent", lambda m: kfuse_fori(m, "on"), "cupy")]
                if method in SOLVERS and "while" in args.kfuse:
                    contenders.append(("kfuse while_loop", kfuse_while, "cupy"))
                if "plain" in args.kfuse:
                    contenders.append(("kfuse plain loop", kfuse_plain, "cupy"))
                    if torch is not None:
                        contenders.append(("kfuse plain loop, torch", kfuse_plain, "torch"))
                if "torch.compile" in args.kfuse and torch is not None:
                    contenders.append(("kfuse inside torch.compile", kfuse_in_torch_compile, "torch"))
                if torch is not None:
                    if "eager" in args.peers:
                        contenders.append(("torch eager", torch_eager, "torch"))
                    if "compile" in args.peers:
                        contenders.append(("torch.compile", torch_compiled, "torch"))
                    if "unrolled" in args.peers:
                        contenders.append((f"torch.compile reduce-overhead x{args.unroll}",
                                           lambda m: torch_unrolled(m, args.unroll), "torch"))
                if method == "cg" and "cupy" in args.peers:
                    contenders.append(("CuPy cg", cupy_cg, "cupy"))
                for name, make, fw in contenders:
                    t0 = time.perf_counter()
                    try:
                        if fw == "torch":
                            state = problem(method, n, dtype, lambda v, d: torch.tensor(v, dtype=getattr(torch, d),
                                                                                        device="cuda"))
                            us, out = timed(make(method), state, args.steps, args.reps, torch_events, args.check)
                            x = out[RESULT.get(method, 1)].double().cpu().numpy()
                        else:
                            state = problem(method, n, dtype, lambda v, d: cp.asarray(v, dtype=d))
                            us, out = timed(make(method), state, args.steps, args.reps, cupy_events, args.check)
                            x = cp.asnumpy(out[RESULT.get(method, 1)]).astype(np.float64)
                        row["us"][name] = us
                        row["err"][name] = float(np.max(np.abs(x - ref)) / np.max(np.abs(ref)))
                    except Exception as e:     # noqa: BLE001 - a contender that fails is reported, not fatal
                        row["note"][name] = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:100]}"
                    print(f"{method} {dtype} n={n} {name}: "
                          + (f"{row['us'][name]:.1f} us/it, error {row['err'][name]:.1e}" if name in row["us"]
                             else row["note"][name]) + f" ({time.perf_counter() - t0:.1f} s)", file=sys.stderr,
                          flush=True)
                rows.append(row)
                # written after every row: a run stopped at its time limit keeps what it measured
                Path(args.out).write_text(report(rows, args, cp, torch, bandwidth))
                Path(args.out).with_suffix(".json").write_text(json.dumps({"bandwidth": bandwidth, "rows": rows},
                                                                          indent=1))
                cp.get_default_memory_pool().free_all_blocks()
                if torch is not None:
                    torch.cuda.empty_cache()
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def report(rows, args, cp, torch, bandwidth) -> str:
    gpu = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    names: list[str] = []
    for r in rows:
        for n in list(r["us"]) + list(r["note"]):
            if n not in names:
                names.append(n)
    peers = [n for n in names if not n.startswith("kfuse") and n != "CuPy cg"]
    lines = [f"# Iterative methods: microseconds per iteration ({gpu})", "",
             f"CuPy {cp.__version__}" + (f", torch {torch.__version__}" if torch is not None else "")
             + f", Python {platform.python_version()}; {args.steps} steps per timed run, median of {args.reps}; "
             f"errors after {args.check} steps; "
             f"copy bandwidth {bandwidth / 1e9:.0f} GB/s; command: `PYTHONPATH=src python3 benchmarks/loops.py "
             + " ".join(sys.argv[1:]) + "`", "",
             "µs per iteration (lower is better). \"vs best peer\": the best torch contender's time over kfuse's "
             "device loop. \"A limit\": the passes over A one iteration needs, over the copy bandwidth. "
             "\"max error\": the largest relative difference of a contender's iterate from float64 NumPy "
             "after the same steps. \"model / measured\": the model's price of the step over the time measured, "
             "for the device loop (the step as a graph's nodes, cost/queued.py) and the plain loop (the plan's "
             "prediction, as kfuse plan gives it).", ""]
    head = ["method", "dtype", "n"] + names + ["vs best peer", "A limit", "max error",
                                                "model / measured: device loop, plain loop"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        us = r["us"]
        cells = [r["method"], r["dtype"], str(r["n"])] + [f"{us[n]:.1f}" if n in us else "failed" if n in r["note"]
                                                        else "-" for n in names]
        best = min([us[n] for n in peers if n in us], default=None)
        k = us.get("kfuse device loop")
        cells.append(f"{best / k:.2f}x" if best and k else "-")
        cells.append(f"{r['limit']:.1f}")
        cells.append(f"{max(r['err'].values()):.1e}" if r["err"] else "-")
        price = r.get("price", {})
        ratios = [f"{price[p] / us[m]:.2f}" if p in price and m in us else "-"
                  for p, m in (("device loop step", "kfuse device loop"), ("plain call", "kfuse plain loop"))]
        cells.append(", ".join(ratios))
        lines.append("| " + " | ".join(cells) + " |")
    notes = [f"- {r['method']} {r['dtype']} n={r['n']} {n}: {msg}" for r in rows for n, msg in r["note"].items()]
    if notes:
        lines += ["", "Failures:", ""] + notes
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
