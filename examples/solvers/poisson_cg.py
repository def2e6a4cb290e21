"""CG and Jacobi-preconditioned CG on 3-D Poisson problems, the operator a stencil of the library.

The grid vectors are 3-D arrays (nz, ny, nx): the stencil (``kfuse.lib.lap7``, the 7-point
Laplacian, or ``kfuse.lib.lap27``, HPCG's 27-point operator; zero Dirichlet boundary) takes the
grid's shape from them, and kfuse fuses A p with p . q in one kernel (p is made by the kernel
before it: a stencil reads its neighbours, which other blocks make).  ``kfuse.while_loop`` runs
the whole solve on the device: one launch and one wait.  Jacobi's preconditioner is the inverse
of the operator's diagonal, a constant (6 or 26): z = r / d, a scaling.

    PYTHONPATH=src python3 examples/solvers/poisson_cg.py [n]    # n^3 unknowns (GPU; SciPy checks)
"""
import kfuse

DIAGONAL = {"lap7": 6.0, "lap27": 26.0}


def _op(name):
    return getattr(kfuse.lib, name)


def cg_update(op, x, r, p, rr):
    """One CG iteration on grid vectors; rr = r . r of the step before (a 0-d device array)."""
    q = _op(op)(p)
    alpha = rr / (p @ q)
    x = x + alpha * p
    r = r - alpha * q
    rr_new = r @ r
    p = r + (rr_new / rr) * p
    return x, r, p, rr_new


def pcg_update(op, x, r, p, rz, rr):
    """One Jacobi-preconditioned CG iteration: z = r / d (d the operator's constant diagonal);
    rz = r . z and rr = r . r of the step before."""
    q = _op(op)(p)
    alpha = rz / (p @ q)
    x = x + alpha * p
    r = r - alpha * q
    z = (1.0 / DIAGONAL[op]) * r
    rz_new = r @ z
    p = z + (rz_new / rz) * p
    return x, r, p, rz_new, r @ r


@kfuse.jit
def _start(b):
    """x = 0, r = b, r . r (and b . b: the tolerance's scale)."""
    return b * 0, b, b @ b


def cg(b, op="lap7", tol=1e-8, max_iterations=2000):
    """Solve A x = b (A the stencil ``op`` on b's grid) until ||r|| <= tol ||b||.  Returns (x, r . r,
    steps taken)."""
    x, r, bb = _start(b)
    s = kfuse.while_loop(lambda s: s[4] > tol * tol * s[0],
                         lambda s: (s[0],) + cg_update(op, *s[1:]), (bb, x, r, r, bb),
                         max_iterations=max_iterations)
    return s[1], s[4], s.iterations


def pcg(b, op="lap7", tol=1e-8, max_iterations=2000):
    """``cg`` with Jacobi's preconditioner.  Returns (x, r . r, steps taken)."""
    x, r, bb = _start(b)
    z = (1.0 / DIAGONAL[op]) * r
    rz = float((r * z).sum())
    s = kfuse.while_loop(lambda s: s[5] > tol * tol * s[0],
                         lambda s: (s[0],) + pcg_update(op, *s[1:]), (bb, x, r, z, rz, bb),
                         max_iterations=max_iterations)
    return s[1], s[5], s.iterations


def scipy_matrix(op, shape):
    """The same operator as a SciPy CSR matrix (C order: x fastest), for checking."""
    import numpy as np
    import scipy.sparse as sp  # type: ignore[import-untyped]
    nz, ny, nx = shape
    if op == "lap7":
        def lap1(n):
            return sp.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1])
        eye = sp.identity
        A = (sp.kron(lap1(nz), sp.kron(eye(ny), eye(nx))) + sp.kron(eye(nz), sp.kron(lap1(ny), eye(nx)))
             + sp.kron(eye(nz), sp.kron(eye(ny), lap1(nx))))
    else:
        def ones3(n):
            return sp.diags([np.ones(n - 1), np.ones(n), np.ones(n - 1)], [-1, 0, 1])
        n = nz * ny * nx
        A = 27 * sp.identity(n) - sp.kron(ones3(nz), sp.kron(ones3(ny), ones3(nx)))
    return sp.csr_matrix(A)


def check(op, x, b, rtol):
    """||b - A x|| / ||b|| in float64 with SciPy's matrix of the operator."""
    import numpy as np
    A = scipy_matrix(op, b.shape)
    xs, bs = (np.asarray(v, dtype=np.float64).ravel() for v in (x, b))
    res = np.linalg.norm(bs - A @ xs) / np.linalg.norm(bs)
    assert res <= rtol, f"{op}: relative residual {res:.2e} > {rtol:.1e}"
    return res


if __name__ == "__main__":
    import sys
    import cupy as cp
    import numpy as np
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    rng = np.random.default_rng(0)
    b = cp.asarray(rng.standard_normal((n, n, n)))
    for op in ("lap7", "lap27"):
        for name, solve in (("CG", cg), ("Jacobi-PCG", pcg)):
            x, rr, k = solve(b, op, tol=1e-10)
            cp.cuda.Device().synchronize()
            res = check(op, cp.asnumpy(x), cp.asnumpy(b), 1e-8)
            print(f"{op} {name}: {k} iterations, relative residual {res:.2e} (SciPy, float64)")
