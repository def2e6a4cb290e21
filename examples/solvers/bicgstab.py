"""BiCGSTAB (stabilised biconjugate gradients) for a general square A, written once as a Python
function and run as one ``kfuse.while_loop``: two products with A, four dot products and the
vector updates per iteration, the scalars on the GPU, one graph launch and one wait per solve.

    PYTHONPATH=src python3 examples/solvers/bicgstab.py    # a demo on a random system (GPU)
"""
import kfuse


@kfuse.jit
def bicgstab_start(A, b, x):
    """r = b - A x, r . r and b . b."""
    r = b - A @ x
    return r, r @ r, b @ b


def bicgstab_update(A, x, r, r0, p, rho):
    """One BiCGSTAB iteration; r0 is the fixed shadow residual, rho = r0 . r from the step before."""
    v = A @ p
    alpha = rho / (r0 @ v)
    s = r - alpha * v
    t = A @ s
    omega = (t @ s) / (t @ t)
    x = x + alpha * p + omega * s
    r = s - omega * t
    rho_new = r0 @ r
    beta = (rho_new / rho) * (alpha / omega)
    p = r + beta * (p - omega * v)
    return x, r, p, rho_new


bicgstab_step = kfuse.jit(bicgstab_update)


def bicgstab_body(state):
    """The while loop's step: the state is (A, b . b, x, r, r0, p, rho, r . r)."""
    A, bb, x, r, r0, p, rho, _ = state
    x, r, p, rho = bicgstab_update(A, x, r, r0, p, rho)
    return A, bb, x, r, r0, p, rho, r @ r


def bicgstab(A, b, x=None, tol=1e-8, max_iterations=1000):
    """Solve A x = b until ||r|| <= tol ||b|| (or ``max_iterations`` steps, with a
    ``kfuse.LoopWarning``).  Returns (x, r, steps taken)."""
    x = b * 0 if x is None else x
    r, rr, bb = bicgstab_start(A, b, x)
    s = kfuse.while_loop(lambda s: s[7] > tol * tol * s[1], bicgstab_body, (A, bb, x, r, r, r, rr, rr),
                         max_iterations=max_iterations)
    return s[2], s[3], s.iterations


if __name__ == "__main__":
    import cupy as cp
    import numpy as np
    n = 2000
    rng = np.random.default_rng(0)
    A = np.eye(n) * 4 + rng.standard_normal((n, n)) / np.sqrt(n)
    b = rng.standard_normal(n)
    x, r, k = bicgstab(cp.asarray(A), cp.asarray(b), tol=1e-10)
    print(f"{k} iterations, error {np.linalg.norm(cp.asnumpy(x) - np.linalg.solve(A, b)):.2e}")
