"""Conjugate gradients for a symmetric positive definite A, written once as a Python function.

``cg_update`` is one iteration (A p, two dot products, three vector updates).  kfuse fuses it into
a few kernels, and the scalars (alpha, beta, r . r) stay on the GPU as 0-d arrays.  ``cg`` runs the
whole solve on the device: ``kfuse.while_loop`` checks ``r . r > tol^2 b . b`` on the GPU after
every step, so a solve is one graph launch and one wait, at the end.  ``cg_step`` is the same
iteration as a jitted function, for loops written in Python.  Works on CuPy arrays and torch CUDA
tensors alike.

    PYTHONPATH=src python3 examples/solvers/cg.py          # a demo on a random SPD system (GPU)
"""
import kfuse


@kfuse.jit
def cg_start(A, b, x):
    """r = b - A x, r . r and b . b."""
    r = b - A @ x
    return r, r @ r, b @ b


def cg_update(A, x, r, p, rr):
    """One CG iteration; rr = r . r from the step before (a 0-d device array)."""
    q = A @ p
    alpha = rr / (p @ q)
    x = x + alpha * p
    r = r - alpha * q
    rr_new = r @ r
    p = r + (rr_new / rr) * p
    return x, r, p, rr_new


cg_step = kfuse.jit(cg_update)


def cg_body(state):
    """The while loop's step: the state is (A, b . b, x, r, p, r . r)."""
    A, bb, x, r, p, rr = state
    return (A, bb) + cg_update(A, x, r, p, rr)


def cg(A, b, x=None, tol=1e-8, max_iterations=1000):
    """Solve A x = b until ||r|| <= tol ||b|| (or ``max_iterations`` steps, with a
    ``kfuse.LoopWarning``).  Returns (x, r . r, steps taken)."""
    x = b * 0 if x is None else x
    r, rr, bb = cg_start(A, b, x)
    s = kfuse.while_loop(lambda s: s[5] > tol * tol * s[1], cg_body, (A, bb, x, r, r, rr),
                         max_iterations=max_iterations)
    return s[2], s[5], s.iterations


if __name__ == "__main__":
    import cupy as cp
    import numpy as np
    n = 2000
    rng = np.random.default_rng(0)
    R = rng.standard_normal((n, n))
    A = np.eye(n) * 4 + (R + R.T) / np.sqrt(8 * n)
    b = rng.standard_normal(n)
    x, rr, k = cg(cp.asarray(A), cp.asarray(b), tol=1e-10)
    print(f"{k} iterations, error {np.linalg.norm(cp.asnumpy(x) - np.linalg.solve(A, b)):.2e}")
    print(cg_step.explain() if cg_step.last else "")
