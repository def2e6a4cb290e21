"""kfuse inside torch.compile (run with -m gpu; needs torch): a jitted call is one ``kfuse::call``
node (compiler/torchop.py) -- no graph break, ``fullgraph=True`` compiles -- and the compiled model
matches a float64 NumPy reference, with inductor, at sizes that are not multiples of 32, both
dtypes, sizes changing between calls; a tensor that requires grad is refused in eager and torch
refuses the backward through the operator in a compiled graph."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import kfuse
from kfuse.errors import KfuseError

torch: Any = None           # set by the _torch fixture
_cg_like: Any = None        # kfuse.jit(_cg_like_step), decorated there once torch is imported (as a user would)

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _torch():
    """torch, imported in the test (not at collection: a CPU run deselects these tests, and a
    module-level skip would show as a skipped test there)."""
    global torch, _cg_like
    torch = pytest.importorskip("torch")
    if _cg_like is None:
        _cg_like = kfuse.jit(_cg_like_step)


def _cg_like_step(A, x, r, rr):
    q = A @ x
    alpha = rr / (x @ q)
    r = r - alpha * q
    return A, r, r @ r, kfuse.sqrt(rr)


def _model(A, x, r):
    rr = r @ r                              # torch work before, kfuse in the middle, torch after
    A2, r2, rr2, s = _cg_like(A, 2.0 * x, r, rr)
    return torch.relu(r2) + 1.0, rr2 / s, A2


def _reference(A, x, r):
    A, x, r = (np.asarray(a, np.float64) for a in (A, x, r))
    rr = r @ r
    x = 2.0 * x
    q = A @ x
    r2 = r - rr / (x @ q) * q
    return np.maximum(r2, 0) + 1.0, (r2 @ r2) / np.sqrt(rr)


def _data(n, dtype, seed):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((n, n)) / np.sqrt(n) + 2 * np.eye(n)
    return [torch.as_tensor(a.astype(dtype), device="cuda") for a in (A, rng.standard_normal(n), rng.standard_normal(n))]


def _rel(got, ref) -> float:
    got = got.detach().cpu().numpy().astype(np.float64)
    return float(np.max(np.abs(got - ref)) / max(np.max(np.abs(ref)), 1e-30))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fullgraph_inductor_matches_the_reference_at_changing_sizes(dtype):
    torch._dynamo.reset()
    compiled = torch.compile(_model, fullgraph=True)
    tol = 2e-4 if dtype == "float32" else 1e-11
    for n, seed in ((1000, 1), (4099, 2), (1000, 3)):
        A, x, r = _data(n, dtype, seed)
        y, s, A2 = compiled(A, x, r)
        ry, rs = _reference(*(t.cpu().numpy() for t in (A, x, r)))
        assert A2 is A or A2.data_ptr() == A.data_ptr()         # passed through, not copied
        assert y.dtype == A.dtype and y.shape == (n,) and s.shape == ()
        assert _rel(y, ry) < tol and _rel(s, rs) < tol


def test_a_jitted_call_is_one_node_and_no_graph_break():
    torch._dynamo.reset()
    A, x, r = _data(257, "float32", 4)
    explained = torch._dynamo.explain(_model)(A, x, r)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    nodes = [n for g in explained.graphs for n in g.graph.nodes if "kfuse" in str(n.target)]
    assert len(nodes) == 1


def test_compiled_and_eager_agree_on_the_same_inputs():
    torch._dynamo.reset()
    A, x, r = _data(1031, "float64", 5)
    eager = _model(A, x, r)
    compiled = torch.compile(_model, fullgraph=True)(A, x, r)
    assert _rel(compiled[0], eager[0].cpu().numpy()) < 1e-12 and _rel(compiled[1], eager[1].cpu().numpy()) < 1e-12


def test_requires_grad_is_refused_in_eager_and_has_no_backward_when_compiled():
    A, x, r = _data(100, "float32", 6)
    x.requires_grad_()
    with pytest.raises(KfuseError, match="requires grad"):
        _cg_like(A, x, r, r @ r)
    with torch.no_grad():
        _cg_like(A, x, r, r @ r)                         # no grad mode: runs
    torch._dynamo.reset()
    # traced with grad enabled: refused while Dynamo traces (its error carries kfuse's message)
    with pytest.raises(Exception, match="requires grad inside torch.compile"):
        torch.compile(_model, fullgraph=True)(A, x, r)[1].backward()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_compiled_script_inside_torch_compile(dtype):
    prog = kfuse.compile("vector x, y, z; scalar s; input x, y; z = waxpby(2.0, x, -1.0, y); s = dot(z, z);"
                         " return z, sqrt(s), s;", dtype=dtype)
    torch._dynamo.reset()
    f = torch.compile(lambda x, y: [t * 1.0 for t in prog(x=x, y=y)], fullgraph=True)
    tol = 2e-5 if dtype == "float32" else 1e-12
    for n in (1000, 4099):
        x, y = (torch.as_tensor(np.random.default_rng(n + k).standard_normal(n).astype(dtype), device="cuda")
                for k in range(2))
        z, norm, s = f(x, y)
        rz = 2.0 * x.double().cpu().numpy() - y.double().cpu().numpy()
        assert _rel(z, rz) < tol and _rel(s, np.array(rz @ rz)) < tol and _rel(norm, np.array(np.sqrt(rz @ rz))) < tol


def test_a_function_decorated_before_torch_says_so_inside_torch_compile_and_works_after_an_eager_call():
    """kfuse registers kfuse::call when it runs with torch imported outside torch.compile; a first
    call inside torch.compile of a function decorated before torch was imported is a clear
    KfuseError, and after one eager call the compiled function has no graph break."""
    import subprocess
    import sys
    code = """
import kfuse, numpy as np
f = kfuse.jit(lambda x, y: (x + 2.0 * y, x @ y))
import torch
x, y = (torch.as_tensor(np.random.default_rng(k).standard_normal(1000), device="cuda") for k in range(2))
g = lambda x, y: f(x, y)[0] * 2.0
try:
    torch.compile(g, fullgraph=True)(x, y)
    print("NO ERROR")
except Exception as e:
    print("first:", "import torch before" in str(e))
f(x, y)
torch._dynamo.reset()
got = torch.compile(g, fullgraph=True)(x, y)
print("after:", float((got - 2 * (x + 2.0 * y)).abs().max()) < 1e-12)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert "first: True" in out.stdout and "after: True" in out.stdout, out.stdout + out.stderr[-2000:]
