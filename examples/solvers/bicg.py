"""BiCG (biconjugate gradients) for a general square A, written once with @kfuse.jit steps.

Each iteration multiplies by A and by A^T: kfuse reads A once for both (the BiCGK kernel) and
fuses the vector updates; scalars stay on the GPU as 0-d arrays, so the loop never waits for it.

    PYTHONPATH=src python3 examples/solvers/bicg.py        # a demo on a random system (GPU)
"""
import kfuse


@kfuse.jit
def bicg_start(A, b, x):
    """r = b - A x (the shadow residual starts equal), and r . r."""
    r = b - A @ x
    return r, r @ r


@kfuse.jit
def bicg_step(A, x, r, rt, p, pt, rho):
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


def bicg(A, b, x=None, iterations=100, tol=None, check_every=10):
    """Solve A x = b.  Runs ``iterations`` steps; with ``tol``, stops early once ||r|| <= tol ||b||,
    looked at every ``check_every`` steps (the only host synchronisation).  Returns (x, r,
    steps taken)."""
    x = b * 0 if x is None else x
    r, rho = bicg_start(A, b, x)
    rt, p, pt = r, r, r
    bb = float((b * b).sum()) if tol is not None else 0.0
    for k in range(1, iterations + 1):
        x, r, rt, p, pt, rho = bicg_step(A, x, r, rt, p, pt, rho)
        if tol is not None and k % check_every == 0 and float((r * r).sum()) <= tol * tol * bb:
            return x, r, k
    return x, r, iterations


if __name__ == "__main__":
    import cupy as cp
    import numpy as np
    n = 2000
    rng = np.random.default_rng(0)
    A = np.eye(n) * 4 + rng.standard_normal((n, n)) / np.sqrt(n)
    b = rng.standard_normal(n)
    x, r, k = bicg(cp.asarray(A), cp.asarray(b), iterations=200, tol=1e-10)
    print(f"{k} iterations, error {np.linalg.norm(cp.asnumpy(x) - np.linalg.solve(A, b)):.2e}")
    print(bicg_step.explain())
