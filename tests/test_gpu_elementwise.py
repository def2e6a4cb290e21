"""Ordinary array code on the GPU (run with -m gpu): every elementwise operator, function and
reduction, alone and fused with gemv, gemtv, spmv and a stencil, against a float64 NumPy
reference at sizes 1, 31, 33, 1000 and 4097 in both dtypes (fresh random data, kfuse's outputs
from a memory pool poisoned with NaN first); NaN and infinity as NumPy gives them; torch tensors
through torch's own functions; a device loop whose body ends in a max-norm."""
import numpy as np
import pytest

import kfuse

pytestmark = pytest.mark.gpu
TOL = {"float32": 2e-5, "float64": 1e-12}
SIZES = [1, 31, 33, 1000, 4097]


def _poison(dtype):
    import cupy as cp
    junk = [cp.full(1 << 20, np.nan, dtype=dtype) for _ in range(8)]
    del junk


def _host(a):
    if hasattr(a, "cpu"):
        return a.cpu().numpy()
    if hasattr(a, "__cuda_array_interface__"):
        import cupy as cp
        return cp.asnumpy(cp.asarray(a))
    return np.asarray(a)


def _close(got, ref, dtype, scale=None, what=""):
    """Norm-wise relative error against the float64 reference (``scale``: the magnitude of the
    terms where the result is a sum of them), NaN and infinity where the reference has them."""
    got = np.asarray(_host(got), dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    special = ~np.isfinite(ref)
    assert np.array_equal(np.isnan(got), np.isnan(ref)), (what, "NaN where NumPy has none, or none where it has")
    assert np.array_equal(got[special & ~np.isnan(ref)], ref[special & ~np.isnan(ref)]), (what, "infinity")
    ok = ~special
    if not ok.any():
        return
    denom = np.max(np.abs(ref[ok])) if scale is None else scale
    err = np.max(np.abs(got[ok] - ref[ok])) / max(denom, 1e-300)
    assert err < TOL[dtype] * 4, (what, err)


def _vec(rng, n, dtype, low=-2.0, high=2.0):
    return rng.uniform(low, high, n).astype(dtype)


MAPS = {   # name: (function of x, y, z (and a scalar s), positive-only inputs)
    "add": (lambda x, y, z, s: x + y, False),
    "sub-number": (lambda x, y, z, s: x - 2.5, False),
    "mul": (lambda x, y, z, s: x * y, False),
    "div": (lambda x, y, z, s: x / y, True),
    "number-over": (lambda x, y, z, s: 3.0 / x, True),
    "neg": (lambda x, y, z, s: -x * y, False),
    "pow2": (lambda x, y, z, s: x ** 2, False),
    "pow3": (lambda x, y, z, s: x ** 3 - y ** -1, True),
    "pow-half": (lambda x, y, z, s: x ** 0.5, True),
    "abs": (lambda x, y, z, s: abs(x - y), False),
    "sqrt": (lambda x, y, z, s: np.sqrt(x), True),
    "exp": (lambda x, y, z, s: np.exp(x), False),
    "log": (lambda x, y, z, s: np.log(x), True),
    "tanh": (lambda x, y, z, s: np.tanh(x), False),
    "sin-cos": (lambda x, y, z, s: np.sin(x) * np.cos(y), False),
    "sigmoid": (lambda x, y, z, s: 1 / (1 + np.exp(-x)), False),
    "maximum": (lambda x, y, z, s: np.maximum(x, y), False),
    "minimum-number": (lambda x, y, z, s: np.minimum(x, 0.5), False),
    "where": (lambda x, y, z, s: np.where(x > y, x, z), False),
    "compare": (lambda x, y, z, s: (x <= y) * 1.0 + (x == x) * 2.0, False),
    "clip": (lambda x, y, z, s: np.clip(x, -1.0, 1.0), False),
    "scalar": (lambda x, y, z, s: s * x + np.exp(y) / s, False),
    "long": (lambda x, y, z, s: x * y + 2.0 * np.exp(z) - abs(x) / (1.0 + y * y), False),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("name", list(MAPS))
def test_elementwise_maps_against_numpy(name, size, dtype):
    import cupy as cp
    fn, positive = MAPS[name]
    rng = np.random.default_rng(size)
    low = 0.25 if positive else -2.0
    jf = kfuse.jit(fn)
    for _ in range(2):                  # the first call, then the cached program on fresh data
        x, y, z = (_vec(rng, size, dtype, low) for _ in range(3))
        s = float(rng.uniform(0.5, 2.0))
        _poison(dtype)
        got = jf(cp.asarray(x), cp.asarray(y), cp.asarray(z), s)
        ref = fn(x.astype(np.float64), y.astype(np.float64), z.astype(np.float64), float(np.dtype(dtype).type(s)))
        _close(got, ref, dtype, what=name)


REDUCTIONS = {   # name: (function, scale of the terms (for sums))
    "sum": (lambda x, y: x.sum(), lambda x, y: np.abs(x).sum()),
    "max": (lambda x, y: x.max(), None),
    "min": (lambda x, y: np.min(x - y), None),
    "mean": (lambda x, y: x.mean(), lambda x, y: np.abs(x).mean()),
    "norm2": (lambda x, y: np.linalg.norm(x), None),
    "norm-inf": (lambda x, y: np.linalg.norm(x - y, np.inf), None),
    "sum-expr": (lambda x, y: (y * x * x).sum(), lambda x, y: np.abs(y * x * x).sum()),
    "sum-exp": (lambda x, y: np.exp(x).sum(), lambda x, y: np.exp(x).sum()),
    "max-of-negatives": (lambda x, y: (-abs(x) - 1.0).max(), None),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_reductions_against_numpy(name, size, dtype):
    """Entries past the end of the last subvector must not count (exp(0) = 1, max over negative
    numbers is not 0)."""
    import cupy as cp
    fn, scale = REDUCTIONS[name]
    rng = np.random.default_rng(size + 7)
    x, y = _vec(rng, size, dtype), _vec(rng, size, dtype)
    _poison(dtype)
    got = kfuse.jit(fn)(cp.asarray(x), cp.asarray(y))
    xh, yh = x.astype(np.float64), y.astype(np.float64)
    ref = fn(xh, yh)
    _close(got, ref, dtype, None if scale is None else scale(xh, yh), what=name)


def _matrix_forms(A, d, e, s):
    return 2.0 * A, A * d[:, None], e[None, :] * A - A / s, A * e + np.maximum(A, 0.0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(1, 1), (31, 33), (33, 1000), (1000, 31), (257, 4097)])
def test_matrix_maps_with_broadcasting(shape, dtype):
    import cupy as cp
    rng = np.random.default_rng(shape[0])
    A = rng.uniform(-2, 2, shape).astype(dtype)
    d, e = _vec(rng, shape[0], dtype), _vec(rng, shape[1], dtype)
    _poison(dtype)
    got = kfuse.jit(_matrix_forms)(cp.asarray(A), cp.asarray(d), cp.asarray(e), 1.5)
    ref = _matrix_forms(A.astype(np.float64), d.astype(np.float64), e.astype(np.float64), 1.5)
    for k, (g, r) in enumerate(zip(got, ref)):
        _close(g, r, dtype, what=f"matrix form {k}")


def _axis_sums(A, d, e):
    return A.sum(axis=1), (A * e * e).sum(axis=1), (d[:, None] * abs(A)).sum(axis=0), A.sum(axis=0) @ e


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(1, 1), (31, 33), (33, 1000), (1000, 31), (257, 4097)])
def test_row_and_column_sums(shape, dtype):
    import cupy as cp
    rng = np.random.default_rng(shape[1])
    A = rng.uniform(-2, 2, shape).astype(dtype)
    d, e = _vec(rng, shape[0], dtype), _vec(rng, shape[1], dtype)
    _poison(dtype)
    got = kfuse.jit(_axis_sums)(cp.asarray(A), cp.asarray(d), cp.asarray(e))
    Ah, dh, eh = A.astype(np.float64), d.astype(np.float64), e.astype(np.float64)
    ref = _axis_sums(Ah, dh, eh)
    scales = [np.abs(Ah).sum(axis=1).max(), (np.abs(Ah) * eh * eh).sum(axis=1).max(),
              (np.abs(dh)[:, None] * np.abs(Ah)).sum(axis=0).max(), np.abs(Ah).sum(axis=0) @ np.abs(eh)]
    for k, (g, r, sc) in enumerate(zip(got, ref, scales)):
        _close(g, r, dtype, scale=float(sc), what=f"axis sum {k}")


def _logreg(A, x, y):
    return A.T @ (1 / (1 + np.exp(-(A @ x))) - y)


def _weighted_lsq(A, x, y, w):
    return A.T @ (w * (A @ x - y))


def _jacobi(R, b, d, x):
    xn = (b - R @ x) / d
    return xn, np.abs(xn - x).max()


def _scaled_product(A, d, x, y):
    return A @ (d * x), np.tanh(A.T @ y) + 1.0


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(31, 33), (1000, 1000), (4097, 1000), (1000, 4097)])
@pytest.mark.parametrize("form", ["logreg", "weighted-lsq", "jacobi", "scaled-product"])
def test_fused_with_products(form, shape, dtype):
    import cupy as cp
    fn = {"logreg": _logreg, "weighted-lsq": _weighted_lsq, "jacobi": _jacobi, "scaled-product": _scaled_product}[form]
    rng = np.random.default_rng(sum(shape))
    m, n = shape
    A = (rng.standard_normal(shape) / np.sqrt(n)).astype(dtype)
    if form == "jacobi":
        A = (rng.standard_normal((m, m)) / np.sqrt(m)).astype(dtype)
        args = [A, _vec(rng, m, dtype), _vec(rng, m, dtype, 1.0, 3.0), _vec(rng, m, dtype)]
    elif form == "scaled-product":
        args = [A, _vec(rng, n, dtype), _vec(rng, n, dtype), _vec(rng, m, dtype)]
    else:
        args = [A, _vec(rng, n, dtype), _vec(rng, m, dtype)] + ([_vec(rng, m, dtype, 0.1, 1.0)] if form != "logreg"
                                                                 else [])
    for vector_on_strips in (False, True):
        _poison(dtype)
        got = kfuse.jit(fn, vector_on_strips=vector_on_strips)(*[cp.asarray(a) for a in args])
        host = [a.astype(np.float64) for a in args]
        ref = fn(*host)
        got, ref = (got if isinstance(got, tuple) else (got,)), (ref if isinstance(ref, tuple) else (ref,))
        for k, (g, r) in enumerate(zip(got, ref)):
            _close(g, r, dtype, what=f"{form} result {k} (vector_on_strips={vector_on_strips})")


def test_logreg_gradient_reads_the_matrix_once():
    """One kernel: the map between the products runs on the strips' rows."""
    rng = np.random.default_rng(0)
    A = rng.standard_normal((8192, 8192)).astype(np.float32)
    x = rng.standard_normal(8192).astype(np.float32)
    compiled = kfuse.jit(_logreg).compile(A, x, x)
    assert len(compiled.plan.kernels) == 1


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_nan_and_infinity_as_numpy(dtype):
    """np.maximum propagates NaN, log of a negative number is NaN, of 0 -inf, x / 0 is inf; the
    max reduction propagates NaN too."""
    import cupy as cp
    x = np.array([1.0, np.nan, -1.0, 0.0, np.inf, 2.0, -np.inf, 3.0] * 5, dtype=dtype)
    y = np.array([0.5, 1.0, np.nan, 0.0, 1.0, 0.0, 2.0, -1.0] * 5, dtype=dtype)

    def f(x, y):
        return np.maximum(x, y), np.minimum(x, y), np.log(x), x / y, np.sqrt(x), abs(x) * y, np.where(x > y, x, y)

    with np.errstate(all="ignore"):
        got = kfuse.jit(f)(cp.asarray(x), cp.asarray(y))
        ref = f(x.astype(np.float64), y.astype(np.float64))
    for k, (g, r) in enumerate(zip(got, ref)):
        _close(g, r, dtype, what=f"special result {k}")
    got = kfuse.jit(lambda x: x.max())(cp.asarray(x))
    assert np.isnan(_host(got))
    finite = np.where(np.isnan(x), 1.0, x).astype(dtype)          # NaN gone, infinity kept
    got = kfuse.jit(lambda x: x.max())(cp.asarray(finite))
    assert float(_host(got)) == np.inf


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_torch_functions_of_torch_tensors(dtype):
    torch = pytest.importorskip("torch")

    def f(x, y):
        return torch.sigmoid(x) * torch.clamp(y, min=-0.5, max=0.5), (x * y).sum(), torch.where(x > 0, x, y).norm()

    rng = np.random.default_rng(5)
    x, y = _vec(rng, 1000, dtype), _vec(rng, 1000, dtype)
    got = kfuse.jit(f)(torch.as_tensor(x, device="cuda"), torch.as_tensor(y, device="cuda"))
    assert all(isinstance(g, torch.Tensor) and g.is_cuda for g in got)
    ref = f(torch.as_tensor(x.astype(np.float64)), torch.as_tensor(y.astype(np.float64)))
    for k, (g, r) in enumerate(zip(got, ref)):
        _close(g, r.numpy(), dtype, scale=float(np.abs(x * y).sum()) if k == 1 else None, what=f"torch result {k}")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_with_spmv_and_a_stencil(dtype):
    import cupy as cp
    import scipy.sparse as sp
    rng = np.random.default_rng(11)
    n = 1000
    M = sp.random(n, n, density=0.01, random_state=11, format="csr") + sp.eye(n, format="csr")
    M.sort_indices()
    A = kfuse.CSR(cp.asarray(M.indptr), cp.asarray(M.indices), cp.asarray(M.data.astype(dtype)), M.shape)
    x, d = _vec(rng, n, dtype), _vec(rng, n, dtype, 1.0, 2.0)

    def f(A, x, d):
        r = A @ x
        return np.maximum(r, 0.0) / d, abs(r - x).max()

    got = kfuse.jit(f)(A, cp.asarray(x), cp.asarray(d))
    r = M.astype(np.float64) @ x.astype(np.float64)
    _close(got[0], np.maximum(r, 0.0) / d.astype(np.float64), dtype, what="spmv map")
    _close(got[1], np.abs(r - x.astype(np.float64)).max(), dtype, what="spmv max-norm")

    u = rng.uniform(-1, 1, (17, 19, 23)).astype(dtype)

    def g(u):
        v = kfuse.lib.lap7(u)
        return v * v + 1.0, (v * v).sum()

    got = kfuse.jit(g)(cp.asarray(u))
    uh = u.astype(np.float64)
    from kfuse.library.expr import cross
    v = (7 * uh - cross(uh)).ravel()
    _close(_host(got[0]).ravel(), v * v + 1.0, dtype, what="stencil map")     # the grid's shape, as u's
    _close(got[1], (v * v).sum(), dtype, scale=(v * v).sum(), what="stencil sum")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_device_loop_body_with_a_max_norm(dtype):
    """A damped Jacobi iteration in a while loop that stops on the max-norm of the update."""
    import cupy as cp
    rng = np.random.default_rng(2)
    n = 500
    R = (rng.standard_normal((n, n)) / (4 * np.sqrt(n))).astype(dtype)
    d = np.full(n, 2.0, dtype=dtype)
    b = rng.standard_normal(n).astype(dtype)

    def body(s):
        R, b, d, x, delta = s
        xn = (b - R @ x) / d
        return R, b, d, xn, np.abs(xn - x).max()

    tol = 1e-5 if dtype == "float32" else 1e-12
    state = (cp.asarray(R), cp.asarray(b), cp.asarray(d), cp.zeros(n, dtype=dtype), cp.asarray(1.0, dtype=dtype))
    out = kfuse.while_loop(lambda s: s[4] > tol, body, state, max_iterations=500)
    assert out.converged
    Rh, bh, dh = R.astype(np.float64), b.astype(np.float64), d.astype(np.float64)
    exact = np.linalg.solve(Rh + np.diag(dh), bh)
    assert np.max(np.abs(_host(out[3]) - exact)) < 100 * tol * np.max(np.abs(exact))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_script_with_expressions_runs(dtype):
    import cupy as cp
    script = """
    vector x, y, w, z, r; matrix A; scalar s, m;
    input A, x, y, w;
    z = x * y + 2.0 * exp(w);
    r = gemv(A, z);
    s = sum(abs(r - x));
    m = max(r) / s;
    return z, r, s, m;
    """
    rng = np.random.default_rng(9)
    n = 1000
    A = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(dtype)
    x, y, w = (_vec(rng, n, dtype) for _ in range(3))
    prog = kfuse.compile(script, dtype=dtype)
    got = prog(A=cp.asarray(A), x=cp.asarray(x), y=cp.asarray(y), w=cp.asarray(w))
    Ah, xh, yh, wh = (a.astype(np.float64) for a in (A, x, y, w))
    z = xh * yh + 2.0 * np.exp(wh)
    r = Ah @ z
    s = np.abs(r - xh).sum()
    _close(got[0], z, dtype, what="z")
    _close(got[1], r, dtype, scale=float(np.max(np.abs(Ah) @ np.abs(z))), what="r")
    _close(got[2], s, dtype, scale=s, what="s")
    _close(got[3], r.max() / s, dtype, what="m")
