"""symv and trmv on the upper triangle, and vmul (diagonal scaling), on the GPU (-m gpu): every
implementation against the float64 NumPy reference by relative error, on fresh random inputs with
the outputs poisoned with NaN and THE LOWER TRIANGLE OF A POISONED WITH NaN (a kernel that reads
one entry below the diagonal, or a tile below it, returns NaN), at sizes that are not multiples of
the tiles, through both front ends (``kfuse.compile`` scripts and ``@kfuse.jit``)."""
import numpy as np
import pytest

import kfuse
from kfuse.reference import evaluate, relative_error

from fusion_util import renamed

pytestmark = pytest.mark.gpu

TOL = {"float32": 1e-5, "float64": 1e-12}
SIZES = [1, 33, 257, 1000, 2053]
SCRIPTS = {
    "symv": "matrix A[n, n]; vector x[n], y[n]; input A, x; y = symv(A, x); return y;",
    "trmv": "matrix A[n, n]; vector x[n], y[n]; input A, x; y = trmv(A, x); return y;",
    "symv-dot": "matrix A[n, n]; vector p[n], q[n]; scalar pq; input A, p; q = symv(A, p); pq = dot(p, q); "
                "return q, pq;",
    "jacobi": "matrix A[n, n]; vector x[n], b[n], dinv[n], ax[n], r[n], z[n], x1[n]; input A, x, b, dinv; "
              "ax = symv(A, x); r = axpy(-1, ax, b); z = vmul(dinv, r); x1 = axpy(1, z, x); return x1;",
    "vmul": "vector d[n], r[n], z[n]; input d, r; z = diagscal(d, r); return z;",
}


def _inputs(program, n, dtype, rng):
    """(device inputs with the lower triangle of every matrix NaN, the float64 values the reference
    sees: the same, rounded to ``dtype``)."""
    import cupy as cp
    host, dev = {}, {}
    for v in program.inputs:
        if v.type == "scalar":
            host[v.name] = dev[v.name] = float(rng.standard_normal())
            continue
        x = rng.standard_normal((n, n) if v.type == "matrix" else (n,)).astype(dtype)
        if v.type == "matrix":
            x[np.tril_indices(n, -1)] = np.nan      # never read (np.triu drops it in the reference)
        host[v.name] = x.astype(np.float64)
        dev[v.name] = cp.asarray(x)
    return host, dev


def _check(prog, n, dtype, seed):
    import cupy as cp
    p = prog.program
    rng = np.random.default_rng(seed)
    host, dev = _inputs(p, n, dtype, rng)
    poisoned = {v.name: cp.full((n,) if v.type == "vector" else (), np.nan, dtype=dtype) for v in p.outputs}
    got = prog(out=poisoned, sync=True, **dev)
    got = got if isinstance(got, tuple) else (got,)
    ref = evaluate(p, host)
    mag = evaluate(p, {k: np.nan_to_num(v, nan=0.0) if isinstance(v, np.ndarray) else v for k, v in host.items()},
                   magnitude=True)
    errors = {}
    for v, g in zip(p.outputs, got):
        errors[v.name] = relative_error(cp.asnumpy(g), np.asarray(ref[v.id]), np.asarray(mag[v.id]))
    return errors


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_first_plan_matches_reference(name, n, dtype):
    prog = kfuse.compile(SCRIPTS[name], dtype=dtype, tuned=False, sizes={"n": n})
    for seed in (n, n + 1):         # fresh data on the second call of the same compiled script
        errors = _check(prog, n, dtype, seed)
        assert all(e < TOL[dtype] for e in errors.values()), errors


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", [33, 1000, 2053])
@pytest.mark.parametrize("name", ["symv", "trmv"])
def test_every_implementation_matches_reference(name, n, dtype):
    """Every tile size and block shape, each its own plan."""
    base = kfuse.compile(SCRIPTS[name], dtype=dtype, tuned=False, sizes={"n": n})
    full = frozenset(range(len(base.program.calls)))
    failures = []
    for m in range(len(base.search.ranked[full])):
        plan = renamed(base.search.plan((full,), (m,)), f"v{m}")
        errors = _check(base.with_plan(plan), n, dtype, 7 + m)
        if not all(e < TOL[dtype] for e in errors.values()):
            failures.append((plan.describe(), errors))
    assert not failures, failures


def _pcg_step(A, p, r, dinv):
    q = kfuse.lib.symv(A, p)
    z = kfuse.lib.vmul(dinv, r)
    return q, p @ q, z, r @ z


def _triangular(A, x):
    return kfuse.lib.trmv(A, x)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("fn", [_pcg_step, _triangular], ids=["pcg-step", "trmv"])
def test_jit_against_numpy(fn, n, dtype):
    import cupy as cp
    rng = np.random.default_rng(n)
    jf = kfuse.jit(fn)
    for _ in range(2):              # the first call compiles, the second reuses it on fresh data
        A = rng.standard_normal((n, n)).astype(dtype)
        upper = np.triu(A).astype(np.float64)
        A[np.tril_indices(n, -1)] = np.nan
        vecs = [rng.standard_normal(n).astype(dtype) for _ in range(fn.__code__.co_argcount - 1)]
        got = jf(cp.asarray(A), *map(cp.asarray, vecs))
        got = got if isinstance(got, tuple) else (got,)
        h = [v.astype(np.float64) for v in vecs]
        if fn is _triangular:
            refs, scales = [upper @ h[0]], [np.abs(upper) @ np.abs(h[0])]
        else:
            sym = upper + np.triu(upper, 1).T
            p, r, dinv = h
            q, z = sym @ p, dinv * r
            refs = [q, p @ q, z, r @ z]
            scales = [np.abs(sym) @ np.abs(p), np.abs(p) @ (np.abs(sym) @ np.abs(p)), np.abs(z), np.abs(r) @ np.abs(z)]
        for g, ref, scale in zip(got, refs, scales):
            g = cp.asnumpy(g) if hasattr(g, "get") else np.asarray(g)
            err = relative_error(np.asarray(g, dtype=np.float64), np.asarray(ref), np.asarray(scale))
            assert err < TOL[dtype], (fn.__name__, n, err)
