"""Device loops on the GPU (run with -m gpu): ``kfuse.fori_loop`` and ``kfuse.while_loop`` against
the same steps made one by one and against float64 NumPy, at sizes that are not multiples of 32,
in both dtypes; early stopping, the iteration bound, a fed-back counter, entries passed on and
computed by scalar arithmetic, torch tensors, and graphs replayed rather than captured again."""
import sys
import warnings

import numpy as np
import pytest

import kfuse
from kfuse.runtime import driver

from conftest import ROOT

pytestmark = pytest.mark.gpu
sys.path.insert(0, str(ROOT / "examples" / "solvers"))
TOL = {"float32": 2e-4, "float64": 1e-10}


def _spd(n, rng):
    R = rng.standard_normal((n, n))
    return np.eye(n) * 4 + (R + R.T) / np.sqrt(8 * n)


def _cg_numpy(A, b, steps):
    """``steps`` CG iterations from x = 0 in float64 (the examples' update)."""
    x = np.zeros_like(b)
    r = b.copy()
    p = r.copy()
    rr = r @ r
    for _ in range(steps):
        q = A @ p
        alpha = rr / (p @ q)
        x = x + alpha * p
        r = r - alpha * q
        rr_new = r @ r
        p = r + (rr_new / rr) * p
        rr = rr_new
    return x, rr


def _rel(a, b):
    a = np.asarray(a, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def _poisoned(cp, n, dtype):
    a = cp.empty(n, dtype)
    a.fill(np.nan)
    return a


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", [517, 1000, 2053])
def test_fori_loop_equals_the_steps_made_one_by_one(n, dtype, fori_mode):
    import cupy as cp
    import cg
    rng = np.random.default_rng(n)
    A, b = _spd(n, rng), rng.standard_normal(n)
    Ad, bd = cp.asarray(A, dtype=dtype), cp.asarray(b, dtype=dtype)
    x0 = _poisoned(cp, n, dtype)
    x0.fill(0)
    r, rr, _ = cg.cg_start(Ad, bd, x0)
    steps = 9                                   # odd: the state ends in the second buffer set
    state = (x0, r, r, rr)
    for _ in range(steps):
        state = cg.cg_step(Ad, *state)
    one_by_one = [cp.asnumpy(v) for v in state]

    def body(i, s):
        A, x, r, p, rr = s
        return (A,) + cg.cg_update(A, x, r, p, rr)
    out = kfuse.fori_loop(0, steps, body, (Ad, x0, r, r, rr))
    assert out[0] is Ad
    for got, want in zip(out[1:], one_by_one):
        assert _rel(cp.asnumpy(got), want.astype(np.float64)) < TOL[dtype]
    x_ref, rr_ref = _cg_numpy(A.astype(dtype).astype(np.float64), b.astype(dtype).astype(np.float64), steps)
    assert _rel(cp.asnumpy(out[1]), x_ref) < 10 * TOL[dtype]
    assert not np.isnan(cp.asnumpy(x0)).any() and float(cp.abs(x0).max()) == 0.0     # the input is not written
    # again with other numbers: the same graphs, no capture
    before = driver.GraphExec.captures
    out2 = kfuse.fori_loop(0, steps, body, (Ad, x0, r * 2, r * 2, rr * 4))
    assert driver.GraphExec.captures == before
    assert _rel(cp.asnumpy(out2[1]), 2 * cp.asnumpy(out[1]).astype(np.float64)) < 10 * TOL[dtype]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fori_loop_counter_passed_on_and_computed_entries(dtype, fori_mode):
    """The body reads i; an entry takes another entry's value (a swap); an entry is scalar
    arithmetic of the program's results (a tail kernel)."""
    import cupy as cp
    rng = np.random.default_rng(5)
    n = 333
    x, y = rng.standard_normal(n), rng.standard_normal(n)

    def body(i, s):
        x, y, c = s
        return y, x + i * y, (x @ y) / 2 + kfuse.sqrt(c * c)
    xd, yd = cp.asarray(x, dtype=dtype), cp.asarray(y, dtype=dtype)
    out = kfuse.fori_loop(3, 10, body, (xd, yd, 1.5))
    hx, hy, hc = x.astype(dtype).astype(np.float64), y.astype(dtype).astype(np.float64), 1.5
    for i in range(3, 10):
        hx, hy, hc = hy, hx + i * hy, (hx @ hy) / 2 + abs(hc)
    for got, want in zip(out, (hx, hy, hc)):
        assert _rel(cp.asnumpy(got), np.asarray(want)) < 10 * TOL[dtype]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("unroll", [2, 3])
def test_fori_loop_unrolled_equals_one_step_at_a_time(unroll, dtype):
    """``unroll``: steps traced as one program (loopsteps.py), the steps left over one at a time:
    CG over 7 and 8 steps, a body of vector updates that fuse across the step boundary, and one
    that reads the counter, each against the loop of one step at a time and float64 NumPy."""
    import cupy as cp
    import cg
    rng = np.random.default_rng(40 + unroll)
    n = 419
    A, b = _spd(n, rng), rng.standard_normal(n)
    Ad, bd = cp.asarray(A, dtype=dtype), cp.asarray(b, dtype=dtype)
    x0 = cp.zeros(n, dtype)
    r, rr, _ = cg.cg_start(Ad, bd, x0)

    def body(i, s):
        A, x, r, p, rr = s
        return (A,) + cg.cg_update(A, x, r, p, rr)
    for steps in (7, 8):
        one = kfuse.fori_loop(0, steps, body, (Ad, x0, r, r, rr))
        out = kfuse.fori_loop(0, steps, body, (Ad, x0, r, r, rr), unroll=unroll)
        assert out[0] is Ad
        for got, want in zip(out[1:], one[1:]):
            assert _rel(cp.asnumpy(got), cp.asnumpy(want).astype(np.float64)) < TOL[dtype]
        x_ref, _ = _cg_numpy(A.astype(dtype).astype(np.float64), b.astype(dtype).astype(np.float64), steps)
        assert _rel(cp.asnumpy(out[1]), x_ref) < 10 * TOL[dtype]
    x, v = rng.standard_normal(n), rng.standard_normal(n)

    def relax(i, s):
        x, v, c = s
        return x + 0.1 * v, 0.9 * v - 0.01 * x + i * 1e-3 * x, c + i
    xd, vd = cp.asarray(x, dtype=dtype), cp.asarray(v, dtype=dtype)
    out = kfuse.fori_loop(2, 13, relax, (xd, vd, 0.5), unroll=unroll)
    hx, hv, hc = x.astype(dtype).astype(np.float64), v.astype(dtype).astype(np.float64), 0.5
    for i in range(2, 13):
        hx, hv, hc = hx + 0.1 * hv, 0.9 * hv - 0.01 * hx + i * 1e-3 * hx, hc + i
    for got, want in zip(out, (hx, hv, hc)):
        assert _rel(cp.asnumpy(got), np.asarray(want)) < 10 * TOL[dtype]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("solver", ["cg", "bicg", "bicgstab"])
def test_while_loop_solvers_converge_and_stop_where_a_host_loop_stops(solver, dtype, while_mode):
    import cupy as cp
    mod = __import__(solver)
    rng = np.random.default_rng(11)
    n = 999
    A = _spd(n, rng) if solver == "cg" else np.eye(n) * 4 + rng.standard_normal((n, n)) / np.sqrt(n)
    b = rng.standard_normal(n)
    tol = {"float32": 1e-4, "float64": 1e-11}[dtype]
    Ad, bd = cp.asarray(A, dtype=dtype), cp.asarray(b, dtype=dtype)
    x, _, steps = getattr(mod, solver)(Ad, bd, tol=tol, max_iterations=500)
    Ah, bh = A.astype(dtype).astype(np.float64), b.astype(dtype).astype(np.float64)
    x = cp.asnumpy(x).astype(np.float64)
    assert 0 < steps < 500
    assert np.linalg.norm(bh - Ah @ x) / np.linalg.norm(bh) < 10 * tol
    # the same iteration from Python, checked every step: stops at the same step
    start = getattr(mod, f"{solver}_start")
    step = getattr(mod, f"{solver}_step")
    r, rr, bb = start(Ad, bd, bd * 0)
    state = {"cg": (bd * 0, r, r, rr), "bicg": (bd * 0, r, r, r, r, rr), "bicgstab": (bd * 0, r, r, rr)}[solver]
    k, res = 0, float(rr)
    while res > tol * tol * float(bb):
        state = step(Ad, *state[:2], r, *state[2:]) if solver == "bicgstab" else step(Ad, *state)
        k += 1
        res = float(state[3]) if solver == "cg" else float(cp.dot(state[1], state[1]))
    assert abs(k - steps) <= 1, (k, steps)      # equal up to the rounding of the last residual
    # the state is that of the step that ended the loop: the steps made one by one agree
    state = {"cg": (bd * 0, r, r, rr), "bicg": (bd * 0, r, r, r, r, rr), "bicgstab": (bd * 0, r, r, rr)}[solver]
    for _ in range(steps):
        state = step(Ad, *state[:2], r, *state[2:]) if solver == "bicgstab" else step(Ad, *state)
    assert _rel(x, cp.asnumpy(state[0]).astype(np.float64)) < 100 * TOL[dtype]


@pytest.fixture(params=["chunks", "graph", "merged", "persistent"])
def while_mode(request, monkeypatch):
    """The ways a while loop runs: chunks launched from the host, one conditional WHILE node
    (every kernel a node of its own, or runs of small kernels merged: checked to have run),
    one persistent kernel (checked to have run)."""
    from kfuse.runtime import loop, merged, persistent
    monkeypatch.setattr(loop, "WHILE_GRAPH", request.param in ("graph", "merged"))
    monkeypatch.setattr(persistent, "MODE", "on" if request.param == "persistent" else "off")
    monkeypatch.setattr(merged, "MODE", "on" if request.param == "merged" else "off")
    monkeypatch.setattr(merged, "MAX_GRID", 8)      # kernels of a few blocks join runs too (run in turn)
    before, merges = persistent.Persistent.launches, merged.Merged.launches
    yield request.param
    if request.param == "persistent":
        assert persistent.Persistent.launches > before, "the loops ran without the persistent kernel"
    if request.param == "merged":
        assert merged.Merged.launches > merges, "the loops ran without merged kernels"


@pytest.fixture(params=["graphs", "merged", "persistent"])
def fori_mode(request, monkeypatch):
    """The ways a fori loop runs: graphs of many steps (every kernel a node, or runs of one-block
    kernels merged: checked to have run), one persistent kernel."""
    from kfuse.runtime import merged, persistent
    monkeypatch.setattr(persistent, "MODE", "on" if request.param == "persistent" else "off")
    monkeypatch.setattr(merged, "MODE", "on" if request.param == "merged" else "off")
    monkeypatch.setattr(merged, "MAX_GRID", 8)      # kernels of a few blocks join runs too (run in turn)
    before, merges = persistent.Persistent.launches, merged.Merged.launches
    yield request.param
    if request.param == "persistent":
        assert persistent.Persistent.launches > before, "the loops ran without the persistent kernel"
    if request.param == "merged":
        assert merged.Merged.launches > merges, "the loops ran without merged kernels"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_while_loop_bound_zero_steps_and_torch(dtype, while_mode):
    import cupy as cp
    import cg
    rng = np.random.default_rng(2)
    n = 300
    A, b = _spd(n, rng), rng.standard_normal(n)
    Ad, bd = cp.asarray(A, dtype=dtype), cp.asarray(b, dtype=dtype)
    r, rr, bb = cg.cg_start(Ad, bd, bd * 0)
    init = (Ad, bb, bd * 0, r, r, rr)
    with pytest.warns(kfuse.LoopWarning, match="max_iterations=7"):
        s = kfuse.while_loop(lambda s: s[5] > 0.0, cg.cg_body, init, max_iterations=7)
    assert s.iterations == 7 and not s.converged
    x7, _ = _cg_numpy(A.astype(dtype).astype(np.float64), b.astype(dtype).astype(np.float64), 7)
    assert _rel(cp.asnumpy(s[2]), x7) < 10 * TOL[dtype]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s0 = kfuse.while_loop(lambda s: s[5] < 0.0, cg.cg_body, init, max_iterations=7)
    assert s0.iterations == 0 and s0.converged
    assert float(cp.abs(s0[2]).max()) == 0.0 and s0[2] is not init[2]
    torch = pytest.importorskip("torch")
    At, bt = torch.as_tensor(Ad, device="cuda"), torch.as_tensor(bd, device="cuda")
    r, rr, bb = cg.cg_start(At, bt, bt * 0)
    st = kfuse.while_loop(lambda s: s[5] > 1e-8 * s[1], cg.cg_body, (At, bb, bt * 0, r, r, rr), max_iterations=300)
    assert isinstance(st[2], torch.Tensor) and st.converged
    xt = st[2].double().cpu().numpy()
    Ah = A.astype(dtype).astype(np.float64)
    assert np.linalg.norm(b.astype(dtype) - Ah @ xt) / np.linalg.norm(b) < 1e-3


def test_fed_back_calls_replay_graphs_without_capturing():
    """A plain loop whose outputs feed its inputs (new pointers each call): after the first
    calls, no graph is captured again."""
    import cupy as cp
    import cg
    rng = np.random.default_rng(4)
    n = 700
    Ad = cp.asarray(_spd(n, rng), dtype="float32")
    bd = cp.asarray(rng.standard_normal(n), dtype="float32")
    r, rr, _ = cg.cg_start(Ad, bd, bd * 0)
    state = (bd * 0, r, r, rr)
    for _ in range(6):
        state = cg.cg_step(Ad, *state)
    before = driver.GraphExec.captures
    for _ in range(40):
        state = cg.cg_step(Ad, *state)
    cp.cuda.get_current_stream().synchronize()
    assert driver.GraphExec.captures == before

