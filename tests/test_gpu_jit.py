"""@kfuse.jit on the GPU (run with -m gpu): each traced form against a float64 NumPy reference
at odd sizes in both dtypes (fresh random data; kfuse's outputs come from a pool poisoned with
NaN first), device scalars (0-d results fed back), scalar arithmetic returned as a result,
torch in -> torch out on torch's stream, repeated calls (graph replay), and the CG and BiCG
examples converging to numpy.linalg.solve."""
import sys

import numpy as np
import pytest

import kfuse
from kfuse.reference import evaluate, relative_error

from conftest import ROOT

pytestmark = pytest.mark.gpu
TOL = {"float32": 1e-5, "float64": 1e-12}
sys.path.insert(0, str(ROOT / "examples" / "solvers"))


def _gemv5(a, A, x, b, y):
    return a * (A @ x) + b * y


def _bicgk(A, p, r):
    return A @ p, A.T @ r


def _gemver(A, u1, v1, u2, v2, a, b, y, z):
    B = A + kfuse.outer(u1, v1) + kfuse.outer(u2, v2)
    x = b * (B.T @ y) + z
    return B, x, a * (B @ x)


def _vectors(a, b, x, y):
    return a * x + y, a * x + b * y, x - y, x / a, 2 * x, x @ y, x + y


def _arith(a, x, y):
    s = x @ y
    w = (s / a - kfuse.sqrt(a * a)) * x + y
    return w, s, s * s / a + 1.0          # the last: scalar arithmetic returned as a result


def _lib(a, A, B, x, y):
    return kfuse.lib.madd(A, B), kfuse.lib.gemtv(a, A, y, -a, x), kfuse.lib.waxpby(a, x, 1.5, x)


FORMS = {  # name: (function, argument kinds: m matrix, v/w vectors of the columns/rows, s number, d 0-d array)
    "gemv5": (_gemv5, "smvsw"),
    "bicgk": (_bicgk, "mvw"),
    "gemver": (_gemver, "mwvwvsswv"),
    "vectors": (_vectors, "ssvv"),
    "vectors-device": (_vectors, "ddvv"),
    "arith": (_arith, "dvv"),
    "lib": (_lib, "smmvw"),
}


def _args(kinds, rows, cols, dtype, rng, xp):
    host, dev = [], []
    for k in kinds:
        if k == "s":
            v = float(rng.uniform(0.5, 2.0))
            host.append(float(np.dtype(dtype).type(v)))
            dev.append(v)
            continue
        shape = {"m": (rows, cols), "v": (cols,), "w": (rows,), "d": ()}[k]
        a = rng.standard_normal(shape) if k != "d" else np.array(rng.uniform(0.5, 2.0))
        a = a.astype(dtype)
        host.append(a.astype(np.float64) if k != "d" else float(a))
        dev.append(xp.asarray(a))
    return host, dev


def _poison_pool(dtype):
    """Fill the memory pool's free blocks with NaN: results kfuse forgets to write show up."""
    import cupy as cp
    junk = [cp.full(1 << 20, np.nan, dtype=dtype) for _ in range(8)]
    del junk


def _check(fn, host, got, dtype):
    """Against the function run on float64 NumPy, with the error relative to the magnitude of the
    terms from the traced program's float64 reference (kfuse.reference)."""
    ref = fn(*host)
    ref = ref if isinstance(ref, tuple) else (ref,)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(ref)
    jf = kfuse.jit(fn)
    low = jf.trace(*host)
    prog = jf.compile(*host).program
    inputs = {name: host[k] for name, k in low.inputs}
    mag = evaluate(prog, inputs, magnitude=True)
    by_name = {v.name: v for v in prog.outputs}
    for k, (g, r) in enumerate(zip(got, ref)):
        g = g.get() if hasattr(g, "get") else g.cpu().numpy() if hasattr(g, "cpu") else g
        where = low.returns[k]
        scale = mag[by_name[low.outputs[where[1]]].id] if where[0] == "out" else np.abs(r)
        err = relative_error(np.asarray(g), np.asarray(r, dtype=np.float64), np.asarray(scale, dtype=np.float64))
        assert err < TOL[dtype] * (10 if where[0] == "expr" else 1), (fn.__name__, k, err)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("size", [1, 31, 33, 1000])
@pytest.mark.parametrize("form", list(FORMS))
def test_traced_forms_against_numpy(form, size, dtype):
    import cupy as cp
    fn, kinds = FORMS[form]
    jf = kfuse.jit(fn)
    rng = np.random.default_rng(size)
    for rep in range(3):                       # first call, then cached calls on fresh data
        host, dev = _args(kinds, size + 2, size, dtype, rng, cp)
        _poison_pool(dtype)
        got = jf(*dev)
        _check(fn, host, got, dtype)
        if rep == 0 and form != "arith":
            outs = got if isinstance(got, tuple) else (got,)
            assert all(isinstance(o, cp.ndarray) for o in outs)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_torch_in_torch_out(dtype):
    torch = pytest.importorskip("torch")
    fn, kinds = FORMS["arith"]
    jf = kfuse.jit(fn)
    rng = np.random.default_rng(7)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):
            host, dev = _args(kinds, 1000, 1000, dtype, rng, np)
            dev = [torch.as_tensor(a, device="cuda") for a in dev]
            got = jf(*dev)
            assert all(isinstance(g, torch.Tensor) and g.is_cuda and g.dtype == dev[1].dtype for g in got)
            assert got[1].dim() == 0 and got[2].dim() == 0
            stream.synchronize()
            _check(fn, host, got, dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_device_scalar_results_feed_the_next_call(dtype):
    """A 0-d result of one call is the scalar input of the next (passed by address); the same
    arguments again replay the captured graph with the same result (up to the order of the
    atomic additions of the dot products)."""
    import cupy as cp
    import cg
    rng = np.random.default_rng(3)
    n = 1000
    R = rng.standard_normal((n, n))
    A = np.eye(n) * 4 + (R + R.T) / np.sqrt(8 * n)
    b = rng.standard_normal(n)
    Ad, bd = cp.asarray(A, dtype=dtype), cp.asarray(b, dtype=dtype)
    r, rr, _ = cg.cg_start(Ad, bd, bd * 0)
    assert isinstance(rr, cp.ndarray) and rr.shape == ()
    out1 = cg.cg_step(Ad, bd * 0, r, r, rr)
    out2 = [cg.cg_step(Ad, bd * 0, r, r, rr) for _ in range(3)][-1]
    for a, b2 in zip(out1, out2):
        assert a.shape == b2.shape and float(cp.max(cp.abs(a - b2))) <= 10 * TOL[dtype] * float(cp.max(cp.abs(a)))
    # against NumPy: one CG step from x = 0
    Ah, bh = A.astype(dtype).astype(np.float64), b.astype(dtype).astype(np.float64)
    q = Ah @ bh
    alpha = (bh @ bh) / (bh @ q)
    x1 = alpha * bh
    assert relative_error(cp.asnumpy(out1[0]), x1, np.abs(x1)) < 100 * TOL[dtype]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", [33, 1000])
def test_cg_and_bicg_converge_to_the_solution(n, dtype):
    import cupy as cp
    import bicg
    import cg
    rng = np.random.default_rng(n)
    R = rng.standard_normal((n, n))
    spd = np.eye(n) * 4 + (R + R.T) / np.sqrt(8 * n)                   # eigenvalues in about [3, 5]
    general = np.eye(n) * 4 + rng.standard_normal((n, n)) / np.sqrt(n)
    b = rng.standard_normal(n)
    tol = {"float32": 1e-5, "float64": 1e-12}[dtype]
    for solve, A in [(cg.cg, spd), (bicg.bicg, general)]:
        Ah = A.astype(dtype).astype(np.float64)
        bh = b.astype(dtype).astype(np.float64)
        exact = np.linalg.solve(Ah, bh)
        x, _, steps = solve(cp.asarray(A, dtype=dtype), cp.asarray(b, dtype=dtype), tol=tol, max_iterations=300)
        x = cp.asnumpy(x).astype(np.float64)
        assert steps < 300, (solve.__name__, "did not converge")
        residual = np.linalg.norm(bh - Ah @ x) / np.linalg.norm(bh)
        error = np.linalg.norm(x - exact) / np.linalg.norm(exact)
        assert residual < 10 * tol and error < 100 * tol, (solve.__name__, residual, error)


def _lanczos(A, v, v_prev, beta):
    """A Lanczos step: beta_new = sqrt(w . w) is returned as scalar arithmetic and fed back."""
    w = A @ v - beta * v_prev
    w = w - (w @ v) * v
    beta_new = kfuse.sqrt(w @ w)
    return A, w / beta_new, v, beta_new


@pytest.mark.parametrize("framework", ["cupy", "torch"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_returned_arithmetic_fed_back_runs_in_the_graph(framework, dtype):
    """A step returning scalar arithmetic (a square root), fed back from Python: the arithmetic
    runs after the kernels in the binding's captured graph (no launch of its own), its 0-d result
    read by the next call by address; every step against NumPy, the graph replayed, and with CuPy
    the results' blocks recycled (the same few pointers come again)."""
    n = 1001
    rng = np.random.default_rng(17)
    R = rng.standard_normal((n, n))
    A = (R + R.T) / np.sqrt(2 * n)
    v0 = rng.standard_normal(n)
    v0 /= np.linalg.norm(v0)
    step = kfuse.jit(_lanczos)
    if framework == "torch":
        torch = pytest.importorskip("torch")
        dev = lambda x: torch.as_tensor(np.asarray(x, dtype=dtype), device="cuda")     # noqa: E731
        host = lambda x: x.double().cpu().numpy()                                        # noqa: E731
    else:
        import cupy as cp
        dev = lambda x: cp.asarray(np.asarray(x, dtype=dtype))                           # noqa: E731
        host = lambda x: cp.asnumpy(x).astype(np.float64)                                # noqa: E731
    state = (dev(A), dev(v0), dev(np.zeros(n)), dev(np.array(0.5)))
    Ah = A.astype(dtype).astype(np.float64)
    pointers = set()
    for k in range(16):         # recycled blocks come back every third call, the block order every other
        v, v_prev, beta = (host(x) for x in state[1:])
        w = Ah @ v - float(beta) * v_prev
        w = w - (w @ v) * v
        want = np.sqrt(w @ w)
        state = step(*state)
        got = float(host(state[3]))
        assert abs(got - want) <= 100 * TOL[dtype] * want, (k, got, want)
        assert relative_error(host(state[1]), w / want, np.abs(w / want)) < 100 * TOL[dtype]
        pointers.add(state[3].data.ptr if framework == "cupy" else state[3].data_ptr())
    ex = step.last.executor
    assert ex.returns is not None and ex.bindings
    for binding in ex.bindings.values():
        assert binding.returns is not None and binding.launches[-1][0].name == "kf_scalars"
    assert any(b.graphs.execs for b in ex.bindings.values()), (
        "the fed-back calls replay a captured graph", list(ex.bindings), [len(b.graphs.seen) for b in ex.bindings.values()])
    assert len(pointers) <= 4, pointers       # the results' blocks recycled (torch's too)


def _axpy_dot(x, y):
    return 2.0 * x + y, x @ y


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_torch_results_are_reused_only_when_nothing_holds_them(dtype):
    """torch results of a fed-back call come from a few recycled blocks, and never from one that
    something still reads: a view of a result, a DLPack capsule of one, or a name."""
    torch = pytest.importorskip("torch")
    import torch.utils.dlpack as dlpack
    n = 1001
    f = kfuse.jit(_axpy_dot)
    gen = torch.Generator(device="cuda").manual_seed(5)
    x = torch.randn(n, dtype=getattr(torch, dtype), device="cuda", generator=gen)
    y = torch.randn(n, dtype=getattr(torch, dtype), device="cuda", generator=gen)
    first = f(x, y)
    view = first[0][3:]                     # a view of a result: holds the block's storage only
    capsule = dlpack.to_dlpack(first[1])    # a capsule of a result: holds the tensor from C++
    named = f(x, y)[0]                      # a name of a result (the other dropped)
    kept = (view.clone(), first[1].clone(), named.clone())
    del first
    pointers = set()
    z = x
    for _ in range(12):
        z, _s = f(z * 0.5, y)               # fed back: the results of the call before last dropped
        pointers.add(z.data_ptr())
    torch.cuda.synchronize()
    assert torch.equal(view, kept[0]) and torch.equal(dlpack.from_dlpack(capsule), kept[1])
    assert torch.equal(named, kept[2])
    assert len(pointers) <= 5, pointers
