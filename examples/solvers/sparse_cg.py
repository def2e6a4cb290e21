"""Conjugate gradients on a sparse (CSR) symmetric positive definite matrix, one launch per solve.

A CG iteration is a ``@kfuse.jit``-style body over the CSR matrix: the sparse mat-vec ``A @ p``
(``spmv``) and the dot ``p . q`` share a kernel, alpha and beta are scalar arithmetic evaluated on
the device.  ``kfuse.while_loop`` runs the whole solve on the device (like
``examples/solvers/poisson_cg.py`` for stencils): the matrix rides in the loop's state, returned
unchanged, so it is read in place (its structure checked once, when the loop binds it), and the
condition ``r . r > tol^2 b . b`` is evaluated on the device after each step: one launch and one
wait.  Works on a cupyx.scipy.sparse.csr_matrix, a torch sparse CSR CUDA tensor or a kfuse.CSR.

    PYTHONPATH=src python3 examples/solvers/sparse_cg.py      # two demo systems, checked with SciPy (seconds)

The demos: a 3-D finite-difference Laplacian (7-point stencil, a finite-element-like mesh matrix)
and a random SPD matrix with skewed row lengths (A = B B^T + d I, B random sparse with a few dense
rows); each solution's relative residual ||b - A x|| / ||b|| is computed in float64 with SciPy's
sparse mat-vec and checked against the tolerance (``check``).  A direct solve (SciPy's spsolve) is
no reference here: it fills in, and took minutes for the skewed matrix.
"""
import kfuse


def cg_update(A, x, r, p, rr):
    """One CG iteration; rr = r . r of the step before (a 0-d device array)."""
    q = A @ p
    alpha = rr / (p @ q)
    x = x + alpha * p
    r = r - alpha * q
    rr_new = r @ r
    p = r + (rr_new / rr) * p
    return x, r, p, rr_new


@kfuse.jit
def _start(A, b, x):
    """r = b - A x, r . r and b . b (the tolerance's scale)."""
    r = b - A @ x
    return r, r @ r, b @ b


def sparse_cg(A, b, x=None, tol=1e-8, max_iterations=1000):
    """Solve A x = b (A a CSR matrix on the GPU, b a CuPy array or torch CUDA tensor) until
    ||r|| <= tol ||b|| or ``max_iterations`` steps.  Returns (x, r . r, steps taken)."""
    x = b * 0 if x is None else x
    r, rr, bb = _start(A, b, x)
    s = kfuse.while_loop(lambda s: s[5] > tol * tol * s[1],
                         lambda s: s[:2] + cg_update(*s[:1], *s[2:]), (A, bb, x, r, r, rr),
                         max_iterations=max_iterations)
    return s[2], float(s[5]), s.iterations


def mesh_matrix(n: int):
    """The 7-point Laplacian of an n x n x n grid (SciPy CSR, float64): SPD, 7 entries per row."""
    import scipy.sparse as sp  # type: ignore[import-untyped]
    d = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n))
    eye = sp.identity(n)
    return (sp.kron(sp.kron(d, eye), eye) + sp.kron(sp.kron(eye, d), eye) + sp.kron(sp.kron(eye, eye), d)).tocsr()


def skewed_matrix(m: int, seed: int = 0):
    """A random SPD matrix with skewed row lengths: B B^T + d I, B m x m with ~3 entries per row and
    a few rows of ~m/50 entries (SciPy CSR, float64)."""
    import numpy as np
    import scipy.sparse as sp
    rng = np.random.default_rng(seed)
    B = sp.random(m, m, density=3.0 / m, random_state=rng, format="lil")
    for row in rng.choice(m, 4, replace=False):
        cols = rng.choice(m, m // 50, replace=False)
        B[row, cols] = rng.standard_normal(len(cols))
    B = B.tocsr()
    A = (B @ B.T).tocsr()
    return (A + sp.identity(m) * (abs(A).sum(axis=1).max() * 0.05 + 1.0)).tocsr()


def check(A, x, b, rtol):
    """||b - A x|| / ||b|| in float64 (A a SciPy matrix, x and b host arrays), at most ``rtol``."""
    import numpy as np
    xs, bs = (np.asarray(v, dtype=np.float64) for v in (x, b))
    res = float(np.linalg.norm(bs - A @ xs) / np.linalg.norm(bs))
    assert res <= rtol, f"relative residual {res:.2e} > {rtol:.1e}"
    return res


def demo():
    import numpy as np
    import cupy as cp
    import cupyx.scipy.sparse as cps
    for name, A in (("3-D mesh Laplacian 40^3", mesh_matrix(40)), ("skewed random SPD", skewed_matrix(20_000))):
        rows = np.diff(A.indptr)
        b = np.random.default_rng(1).standard_normal(A.shape[0])
        for dtype, tol in (("float64", 1e-10), ("float32", 1e-5)):
            Ad = cps.csr_matrix(A.astype(dtype))
            x, rr, steps = sparse_cg(Ad, cp.asarray(b.astype(dtype)), tol=tol, max_iterations=5000)
            res = check(A, cp.asnumpy(x), b, 10 * tol)      # the float64 matrix and right-hand side
            print(f"{name} ({A.shape[0]} rows, {A.nnz} non-zeros, rows of {rows.min()}-{rows.max()}), {dtype}: "
                  f"{steps} steps, ||b - A x|| / ||b|| = {res:.2e} (SciPy mat-vec, float64)")


if __name__ == "__main__":
    demo()
