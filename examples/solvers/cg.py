"""Conjugate gradients for a symmetric positive definite A, written once with @kfuse.jit steps.

Each iteration is one call: kfuse fuses the step (A p, two dot products, three vector updates)
into a few kernels, and the scalars (alpha, beta, the residual norm) stay on the GPU as 0-d
arrays: the loop never waits for the device.  Works on CuPy arrays and torch CUDA tensors alike.

    PYTHONPATH=src python3 examples/solvers/cg.py          # a demo on a random SPD system (GPU)
"""
import kfuse


@kfuse.jit
def cg_start(A, b, x):
    """r = b - A x, and r . r."""
    r = b - A @ x
    return r, r @ r


@kfuse.jit
def cg_step(A, x, r, p, rr):
    """One CG iteration; rr = r . r from the step before (a 0-d device array)."""
    q = A @ p
    alpha = rr / (p @ q)
    x = x + alpha * p
    r = r - alpha * q
    rr_new = r @ r
    p = r + (rr_new / rr) * p
    return x, r, p, rr_new


def cg(A, b, x=None, iterations=100, tol=None, check_every=10):
    """Solve A x = b.  Runs ``iterations`` steps; with ``tol``, stops early once ||r|| <= tol ||b||,
    looked at every ``check_every`` steps (the only host synchronisation).  Returns (x, r . r,
    steps taken)."""
    x = b * 0 if x is None else x
    r, rr = cg_start(A, b, x)
    p = r
    bb = float((b * b).sum()) if tol is not None else 0.0
    for k in range(1, iterations + 1):
        x, r, p, rr = cg_step(A, x, r, p, rr)
        if tol is not None and k % check_every == 0 and float(rr) <= tol * tol * bb:
            return x, rr, k
    return x, rr, iterations


if __name__ == "__main__":
    import cupy as cp
    import numpy as np
    n = 2000
    rng = np.random.default_rng(0)
    R = rng.standard_normal((n, n))
    A = np.eye(n) * 4 + (R + R.T) / np.sqrt(8 * n)
    b = rng.standard_normal(n)
    x, rr, k = cg(cp.asarray(A), cp.asarray(b), iterations=200, tol=1e-10)
    print(f"{k} iterations, error {np.linalg.norm(cp.asnumpy(x) - np.linalg.solve(A, b)):.2e}")
    print(cg_step.explain())
