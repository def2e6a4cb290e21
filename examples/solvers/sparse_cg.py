"""Conjugate gradients on a sparse (CSR) symmetric positive definite matrix.

One CG iteration is one call of a compiled script: the sparse mat-vec ``q = spmv(A, p)`` and the
dot ``p . q`` share a kernel, alpha and beta are scalar arithmetic evaluated on the device, and
r . r stays on the GPU as a 0-d array (read by address).  The Python loop only launches (the
launches replay from a CUDA graph after the second call) and looks at r . r every ``check``
steps.  Works on a cupyx.scipy.sparse.csr_matrix, a torch sparse CSR CUDA tensor or a kfuse.CSR.

    PYTHONPATH=src python3 examples/solvers/sparse_cg.py      # two demo systems, checked against SciPy

The demos: a 3-D finite-difference Laplacian (7-point stencil, a finite-element-like mesh matrix)
and a random SPD matrix with skewed row lengths (A = B B^T + d I, B random sparse with a few dense
rows); each solution is compared with SciPy's in float64.
"""
import kfuse

CG_STEP = """
csr A;
vector x, r, p, q, x1, r1, p1;
scalar rr, pq, rr1, alpha, beta;
input A, x, r, p, rr;
q = spmv(A, p);
pq = dot(p, q);
alpha = rr / pq;
x1 = axpy(alpha, p, x);
r1 = axpy(-alpha, q, r);
rr1 = dot(r1, r1);
beta = rr1 / rr;
p1 = axpy(beta, p, r1);
return x1, r1, p1, rr1;
"""

CG_START = """
csr A;
vector b, x, q, r;
scalar rr, bb;
input A, b, x;
q = spmv(A, x);
r = axpy(-1, q, b);
rr = dot(r, r);
bb = dot(b, b);
return r, rr, bb;
"""

_programs: dict = {}


def programs(dtype: str):
    if dtype not in _programs:
        _programs[dtype] = (kfuse.compile(CG_START, dtype=dtype, name="sparse_cg_start"),
                            kfuse.compile(CG_STEP, dtype=dtype, name="sparse_cg_step"))
    return _programs[dtype]


def sparse_cg(A, b, x=None, tol=1e-8, max_iterations=1000, check=10):
    """Solve A x = b (A a CSR matrix on the GPU, b a CuPy array or torch CUDA tensor) until
    ||r|| <= tol ||b|| or ``max_iterations`` steps.  Returns (x, r . r, steps taken)."""
    dtype = str(b.dtype).replace("torch.", "")
    start, step = programs(dtype)
    x = b * 0 if x is None else x
    r, rr, bb = start(A=A, b=b, x=x)
    p = r
    limit = tol * tol * float(bb)
    k = 0
    while k < max_iterations:
        x, r, p, rr = step(A=A, x=x, r=r, p=p, rr=rr)
        k += 1
        if k % check == 0 and float(rr) <= limit:
            break
    return x, float(rr), k


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


def demo():
    import numpy as np
    import cupy as cp
    import cupyx.scipy.sparse as cps
    import scipy.sparse.linalg as spla  # type: ignore[import-untyped]
    for name, A in (("3-D mesh Laplacian 40^3", mesh_matrix(40)), ("skewed random SPD", skewed_matrix(20_000))):
        rows = np.diff(A.indptr)
        b = np.random.default_rng(1).standard_normal(A.shape[0])
        for dtype, tol in (("float64", 1e-10), ("float32", 1e-5)):
            Ad = cps.csr_matrix(A.astype(dtype))
            x, rr, steps = sparse_cg(Ad, cp.asarray(b.astype(dtype)), tol=tol, max_iterations=5000)
            ref = spla.spsolve(A.tocsc(), b)
            err = np.linalg.norm(cp.asnumpy(x) - ref) / np.linalg.norm(ref)
            print(f"{name} ({A.shape[0]} rows, {A.nnz} non-zeros, rows of {rows.min()}-{rows.max()}), {dtype}: "
                  f"{steps} steps, ||x - x_scipy|| / ||x_scipy|| = {err:.2e}")


if __name__ == "__main__":
    demo()
