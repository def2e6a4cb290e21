"""BiCG (biconjugate gradients) for a general square A, written once as a Python function.

Each iteration multiplies by A and by A^T: kfuse reads A once for both (the BiCGK kernel) and
fuses the vector updates; scalars stay on the GPU as 0-d arrays.  ``bicg`` runs the whole solve
as one ``kfuse.while_loop`` (one graph launch, one wait at the end); ``bicg_step`` is the
iteration as a jitted function, for loops written in Python.

    PYTHONPATH=src python3 examples/solvers/bicg.py        # a demo on a random system (GPU)
"""
import kfuse


@kfuse.jit
def bicg_start(A, b, x):
    """r = b - A x (the shadow residual starts equal), r . r and b . b."""
    r = b - A @ x
    return r, r @ r, b @ b


def bicg_update(A, x, r, rt, p, pt, rho):
    """One BiCG iteration; rho = rt . r from the step before (a 0-d device array)."""
    q = A @ p
    qt = A.T @ pt
    alpha = rho / (pt @ q)
    x = x + alpha * p
    r = r - alpha * q
    rt = rt - alpha * qt
    rho_new = rt @ r
    beta = rho_new / rho
    p = r + beta * p
    pt = rt + beta * pt
    return x, r, rt, p, pt, rho_new


bicg_step = kfuse.jit(bicg_update)


def bicg_body(state):
    """The while loop's step: the state is (A, b . b, x, r, rt, p, pt, rho, r . r)."""
    A, bb, x, r, rt, p, pt, rho, _ = state
    x, r, rt, p, pt, rho = bicg_update(A, x, r, rt, p, pt, rho)
    return A, bb, x, r, rt, p, pt, rho, r @ r


def bicg(A, b, x=None, tol=1e-8, max_iterations=1000):
    """Solve A x = b until ||r|| <= tol ||b|| (or ``max_iterations`` steps, with a
    ``kfuse.LoopWarning``).  Returns (x, r, steps taken)."""
    x = b * 0 if x is None else x
    r, rr, bb = bicg_start(A, b, x)
    s = kfuse.while_loop(lambda s: s[8] > tol * tol * s[1], bicg_body, (A, bb, x, r, r, r, r, rr, rr),
                         max_iterations=max_iterations)
    return s[2], s[3], s.iterations


if __name__ == "__main__":
    import cupy as cp
    import numpy as np
    n = 2000
    rng = np.random.default_rng(0)
    A = np.eye(n) * 4 + rng.standard_normal((n, n)) / np.sqrt(n)
    b = rng.standard_normal(n)
    x, r, k = bicg(cp.asarray(A), cp.asarray(b), tol=1e-10)
    print(f"{k} iterations, error {np.linalg.norm(cp.asnumpy(x) - np.linalg.solve(A, b)):.2e}")
