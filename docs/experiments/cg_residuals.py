"""CG in NumPy, float32 and float64, with two summation orders: how far apart rounding alone puts the
final residuals of two correct implementations, for spectra of several widths and iteration counts
(issue 17: "final residuals within 1e-5 (float32) / 1e-12 (float64) relative of each other" can only
be checked on a system that is still far from rounding after the timed iterations). CPU only.

    python3 docs/experiments/cg_residuals.py
"""
import numpy as np
def system(n, lo, hi, seed=0):
    rs = np.random.default_rng(seed)
    R = rs.standard_normal((n, n)); R = (R + R.T) / np.sqrt(2.0)
    # semicircle of radius 2*c*sqrt(n)*... : eigenvalues of c/sqrt(n) R in about [-2c, 2c]
    c = (hi - lo) / 4; A = (c / np.sqrt(n)) * R; A[np.arange(n), np.arange(n)] += (hi + lo) / 2
    return A, rs.standard_normal(n)
def cg(A, b, iters, dt, order):
    A = A.astype(dt); b = b.astype(dt); x = np.zeros_like(b)
    dot = (lambda u, v: np.dot(u, v)) if order == 0 else (lambda u, v: dt(np.sum((u * v)[::-1].reshape(32, -1).sum(1))))
    mv = (lambda A, v: A @ v) if order == 0 else (lambda A, v: (A[:, ::-1] @ v[::-1]).astype(dt))
    r = b - mv(A, x); p = r.copy(); rr = dot(r, r)
    for _ in range(iters):
        q = mv(A, p); alpha = rr / dot(p, q); x = x + alpha * p; r = r - alpha * q
        rn = dot(r, r); p = r + (rn / rr) * p; rr = rn
    A64 = A.astype(np.float64); res = np.linalg.norm(b.astype(np.float64) - A64 @ x.astype(np.float64)) / np.linalg.norm(b)
    return res
n = 1024
for lo, hi in ((1, 16), (1, 100), (1, 400), (1, 1000)):   # 400, 1000: the soft edge of the semicircle reaches 0 (indefinite)
    A, b = system(n, lo, hi)
    for iters in (10, 20, 30):
        for dt in (np.float32, np.float64):
            r0, r1 = cg(A, b, iters, dt, 0), cg(A, b, iters, dt, 1)
            print(f"kappa~{hi/lo:5.0f} iters {iters:2d} {dt.__name__:8s} residual {r0:.3e} / {r1:.3e}  rel diff {abs(r0-r1)/r0:.1e}")
