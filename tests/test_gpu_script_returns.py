"""Scripts that return scalar arithmetic, on the GPU (run with -m gpu): every returned item
against a float64 NumPy reference by relative error (the scale: the magnitude of its terms, from
``kfuse.reference``), at sizes that are not multiples of 32, in both dtypes, on fresh random data
each call, with kfuse's outputs taken from a pool poisoned with NaN first (and outputs given
with ``out=`` filled with NaN); scalar inputs as Python numbers (passed by value) and as 0-d
device arrays (read by address); a CG step fed its own results; torch in -> torch out on torch's
stream; a CuPy stream given with ``stream=``; ``bind`` and ``calls.outputs``."""
import numpy as np
import pytest

import kfuse
from kfuse.ir.program import ScalarArg
from kfuse.reference import evaluate, relative_error, returned

pytestmark = pytest.mark.gpu
TOL = {"float32": 1e-5, "float64": 1e-12}
SIZES = [1, 33, 1000, 4097]

NORMS = """vector r, b, y;
scalar rr, bb, tol, ratio;
input r, b, tol;
rr = dot(r, r);
bb = dot(b, b);
y = axpy(tol, r, b);
ratio = rr / bb;
return y, sqrt(rr), ratio, rr, sqrt(ratio) - tol, -bb / (tol * tol);
"""
CG = """matrix A;
vector x, r, p, q;
scalar rr, pq, rr_new, alpha;
input A, x, r, p, rr;
q = gemv(A, p);
pq = dot(p, q);
alpha = rr / pq;
x = axpy(alpha, p, x);
r = axpy(-alpha, q, r);
rr_new = dot(r, r);
return x, r, rr_new, rr_new / rr, sqrt(rr_new);
"""


def _poison_pool(dtype):
    """Fill the memory pool's free blocks with NaN: results kfuse forgets to write show up."""
    import cupy as cp
    junk = [cp.full(1 << 20, np.nan, dtype=dtype) for _ in range(8)]
    del junk


def _host(x):
    if hasattr(x, "get"):
        return np.asarray(x.get(), dtype=np.float64)
    if hasattr(x, "cpu"):
        return x.cpu().double().numpy()
    return np.asarray(x, dtype=np.float64)


def _check(prog, host: dict, got, dtype: str, framework=None):
    """Every returned item against the float64 reference of the program, the error relative to
    the magnitude of its terms (ten times the tolerance for arithmetic on reduced scalars)."""
    program = prog.program
    ref = returned(program, evaluate(program, host))
    mag = returned(program, evaluate(program, host, magnitude=True), magnitude=True)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(ref) == len(program.returned)
    for k, (g, r, m, item) in enumerate(zip(got, ref, mag, program.returned)):
        if framework is not None:
            assert isinstance(g, framework), (k, type(g))
        r = np.asarray(r, dtype=np.float64)
        assert tuple(g.shape) == r.shape, (k, g.shape, r.shape)
        assert str(g.dtype).removeprefix("torch.") == dtype, (k, g.dtype)
        err = relative_error(_host(g), r, np.abs(np.asarray(m, dtype=np.float64)))
        assert err < TOL[dtype] * (10 if isinstance(item, ScalarArg) else 1), (k, err)


def _vector(rng, n, dtype):
    a = rng.standard_normal(n).astype(dtype)
    return a, a.astype(np.float64)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("tol_kind", ["number", "device"])
def test_returned_arithmetic_against_numpy(n, dtype, tol_kind):
    import cupy as cp
    prog = kfuse.compile(NORMS, dtype=dtype, sizes={"r.len": n})
    rng = np.random.default_rng(n)
    for _ in range(3):                        # the first call, then calls that find their binding
        (r, rh), (b, bh) = _vector(rng, n, dtype), _vector(rng, n, dtype)
        tol = float(np.dtype(dtype).type(rng.uniform(0.5, 2.0)))
        host = {"r": rh, "b": bh, "tol": tol}
        dev_tol = tol if tol_kind == "number" else cp.asarray(np.array(tol, dtype=dtype))
        _poison_pool(dtype)
        got = prog(r=cp.asarray(r), b=cp.asarray(b), tol=dev_tol)
        cp.cuda.get_current_stream().synchronize()
        _check(prog, host, got, dtype, cp.ndarray)
        assert all(g.shape == () for g in got[1:])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_outputs_given_with_out_are_written_and_read(dtype):
    """``out=`` names the returned vector and the scalars the arithmetic reads (``bb`` is
    returned only through it): poisoned with NaN, every one is written and the arithmetic reads
    them there."""
    import cupy as cp
    n = 1000
    prog = kfuse.compile(NORMS, dtype=dtype, sizes={"r.len": n})
    rng = np.random.default_rng(11)
    for _ in range(2):
        (r, rh), (b, bh) = _vector(rng, n, dtype), _vector(rng, n, dtype)
        out = {"y": cp.full(n, np.nan, dtype=dtype), "rr": cp.full((), np.nan, dtype=dtype),
               "bb": cp.full((), np.nan, dtype=dtype)}
        got = prog(out=out, sync=True, r=cp.asarray(r), b=cp.asarray(b), tol=1.25)
        assert got[0] is out["y"] and got[3] is out["rr"]
        _check(prog, {"r": rh, "b": bh, "tol": 1.25}, got, dtype)
        assert abs(float(out["bb"]) - bh @ bh) <= TOL[dtype] * (bh @ bh)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", [33, 1000])
def test_cg_steps_fed_their_own_results(n, dtype):
    """A CG step whose returned ``rr_new`` (a 0-d device array, read by address) is the next
    step's ``rr``; the arithmetic reads it and the input of the step."""
    import cupy as cp
    prog = kfuse.compile(CG, dtype=dtype, sizes={"A.rows": n})
    rng = np.random.default_rng(n + 1)
    R = rng.standard_normal((n, n))
    A = (np.eye(n) * 4 + (R + R.T) / np.sqrt(8 * n)).astype(dtype)
    b = rng.standard_normal(n).astype(dtype)
    Ad = cp.asarray(A)
    x, r, p = cp.zeros(n, dtype), cp.asarray(b), cp.asarray(b)
    rr = cp.asarray(np.array(b.astype(np.float64) @ b.astype(np.float64), dtype=dtype))
    for _ in range(3):
        host = {"A": A.astype(np.float64), "x": _host(x), "r": _host(r), "p": _host(p), "rr": float(rr)}
        _poison_pool(dtype)
        got = prog(A=Ad, x=x, r=r, p=p, rr=rr, sync=True)
        _check(prog, host, got, dtype, cp.ndarray)
        x, r, rr_new, beta, norm = got
        assert abs(float(norm) ** 2 - float(rr_new)) <= 10 * TOL[dtype] * float(rr_new)
        p = r + beta * p                       # the next direction, with the returned ratio
        rr = rr_new


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_torch_in_torch_out_on_torchs_stream(dtype):
    torch = pytest.importorskip("torch")
    n = 4097
    prog = kfuse.compile(NORMS, dtype=dtype, sizes={"r.len": n})
    rng = np.random.default_rng(5)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for tol_kind in ("number", "device", "number"):
            (r, rh), (b, bh) = _vector(rng, n, dtype), _vector(rng, n, dtype)
            tol = float(np.dtype(dtype).type(rng.uniform(0.5, 2.0)))
            dev_tol = tol if tol_kind == "number" else torch.tensor(tol, dtype=getattr(torch, dtype), device="cuda")
            got = prog(r=torch.as_tensor(r, device="cuda"), b=torch.as_tensor(b, device="cuda"), tol=dev_tol)
            assert all(g.is_cuda for g in got) and all(g.dim() == 0 for g in got[1:])
            stream.synchronize()
            _check(prog, {"r": rh, "b": bh, "tol": tol}, got, dtype, torch.Tensor)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_stream_given_to_the_call(dtype):
    """The arithmetic's kernel runs on the stream given with ``stream=``, after the plan's."""
    import cupy as cp
    n = 1000
    prog = kfuse.compile(NORMS, dtype=dtype, sizes={"r.len": n})
    rng = np.random.default_rng(9)
    stream = cp.cuda.Stream(non_blocking=True)
    for _ in range(3):
        (r, rh), (b, bh) = _vector(rng, n, dtype), _vector(rng, n, dtype)
        rd, bd = cp.asarray(r), cp.asarray(b)
        _poison_pool(dtype)
        cp.cuda.get_current_stream().synchronize()        # inputs and poison written before the call
        got = prog(r=rd, b=bd, tol=0.75, stream=stream)
        stream.synchronize()
        _check(prog, {"r": rh, "b": bh, "tol": 0.75}, got, dtype, cp.ndarray)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_bind_and_call_outputs(dtype):
    """A bound call writes the same result arrays every call (new input data, new results);
    ``calls.outputs`` gives the program's outputs, the scalars the arithmetic reads included."""
    import cupy as cp
    n = 33
    prog = kfuse.compile(NORMS, dtype=dtype, sizes={"r.len": n})
    rng = np.random.default_rng(13)
    rd, bd = cp.empty(n, dtype), cp.empty(n, dtype)
    _poison_pool(dtype)
    bound = prog.bind(r=rd, b=bd, tol=1.5)
    first = None
    for _ in range(3):
        (r, rh), (b, bh) = _vector(rng, n, dtype), _vector(rng, n, dtype)
        rd.set(r)
        bd.set(b)
        got = bound(sync=True)
        first = first or got
        assert got is first
        _check(prog, {"r": rh, "b": bh, "tol": 1.5}, got, dtype, cp.ndarray)
    outs = prog.calls.outputs(sync=True, r=rd, b=bd, tol=1.5)
    assert [o.shape for o in outs] == [(n,), (), ()]
    assert abs(float(outs[2]) - bh @ bh) <= TOL[dtype] * (bh @ bh)
