"""kfuse::call end to end on the CPU (torch CPU build, no GPU): the executor's call replaced by the
float64 NumPy reference of the program (kfuse.reference), so that the operator's plumbing -- its
form, fake results, outputs written into tensors of their own, returned arithmetic, arguments
passed through -- runs under torch.compile(fullgraph=True) with the eager, aot_eager and inductor
backends and is compared with the same model in eager.  Needs torch (CPU is enough)."""
import sys
import numpy as np
import torch
sys.path.insert(0, "src")   # run from the repository root
import kfuse
from kfuse import reference
from kfuse.runtime.executor import Executor


def reference_call(self, inputs, out, sync, stream):
    host = {k: (v.detach().double().numpy() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
    env = reference.evaluate(self.program, host)
    res = []
    like = next(v for v in inputs.values() if isinstance(v, torch.Tensor))
    from kfuse.runtime.binding import result_shapes
    shapes = result_shapes(self.program, {k: tuple(v.shape) for k, v in inputs.items() if isinstance(v, torch.Tensor)})
    for v in self.program.outputs:
        value = torch.from_numpy(np.array(env[v.id], dtype=np.float64))
        if out is None:         # the plain call: a new tensor (shape from the reference)
            res.append(value.reshape(shapes[v.name]).to(like.dtype))
            continue
        t = out[v.name]
        t.copy_(value.reshape(t.shape).to(t.dtype))
        res.append(t)
    return res[0] if len(res) == 1 else tuple(res)


Executor.call = reference_call


@kfuse.jit
def step(A, x, r, rr):
    q = A @ x
    alpha = rr / (x @ q)
    r = r - alpha * q
    return A, r, r @ r, kfuse.sqrt(rr), r


@kfuse.jit
def lap(u, c):
    return kfuse.lib.lap7(u) + c * u, (u * u).sum()


prog = kfuse.compile("vector x, y, z; scalar s; input x, y; z = waxpby(2.0, x, -1.0, y); s = dot(z, z);"
                     " return z, s;", dtype="float64")   # returned arithmetic of a script: a kernel (GPU only)


def model(A, x, r, g):
    rr = r @ r
    A2, r2, rr2, s, r3 = step(A, 2.0 * x, r, rr)
    w, uu = lap(g, 0.5)
    z, ss = prog(x=r2, y=x)
    return torch.relu(r2) + 1.0, rr2 / s, A2 is A, r3 - r2, w * 2, uu, z, ss


def eager_reference(A, x, r, g):
    """The same model in NumPy (float64)."""
    A, x, r, g = (t.double().numpy() for t in (A, x, r, g))
    rr = r @ r
    x2 = 2.0 * x
    q = A @ x2
    r2 = r - rr / (x2 @ q) * q
    u = g
    lap7 = kfuse.lib.lap7(u)          # the shipped function's NumPy reference
    z = 2.0 * r2 - x
    return [np.maximum(r2, 0) + 1.0, (r2 @ r2) / np.sqrt(rr), None, np.zeros_like(r2), 2 * (lap7 + 0.5 * u),
            (u * u).sum(), z, z @ z]


torch.manual_seed(0)
n = 37
A = torch.randn(n, n, dtype=torch.float64) / n ** 0.5 + 2 * torch.eye(n, dtype=torch.float64)
x, r = torch.randn(n, dtype=torch.float64), torch.randn(n, dtype=torch.float64)
g = torch.randn(5, 6, 7, dtype=torch.float64)
ref = eager_reference(A, x, r, g)
eager = model(A, x, r, g)
for backend in ("eager", "aot_eager", "inductor"):
    torch._dynamo.reset()
    try:
        got = torch.compile(model, fullgraph=True, backend=backend)(A, x, r, g)
    except Exception as e:      # noqa: BLE001
        print(f"{backend}: FAILED {type(e).__name__}: {str(e)[:300]}")
        continue
    errs = []
    for k, (a, e, want) in enumerate(zip(got, eager, ref)):
        if want is None:
            errs.append(f"passthrough={a}")
            continue
        a, e = np.asarray(a.detach().double()), np.asarray(e.detach().double())
        scale = max(np.max(np.abs(want)), 1e-30)
        errs.append(f"{np.max(np.abs(a - want)) / scale:.1e}/{np.max(np.abs(e - want)) / scale:.1e}")
    print(f"{backend}: fullgraph OK; relative error compiled/eager per result: {', '.join(errs)}")
explained = torch._dynamo.explain(model)(A, x, r, g)
print(f"explain: {explained.graph_count} graph(s), {explained.graph_break_count} break(s), "
      f"{sum('kfuse' in str(nd.target) for gm in explained.graphs for nd in gm.graph.nodes)} kfuse::call node(s)")
torch._dynamo.reset()
f = torch.compile(model, fullgraph=True, dynamic=True)
for n in (37, 53):
    A = torch.randn(n, n, dtype=torch.float64) / n ** 0.5 + 2 * torch.eye(n, dtype=torch.float64)
    x, r = torch.randn(n, dtype=torch.float64), torch.randn(n, dtype=torch.float64)
    g = torch.randn(5, 6, n % 9 + 3, dtype=torch.float64)
    got, want = f(A, x, r, g), eager_reference(A, x, r, g)
    print("dynamic", n, max(float(np.max(np.abs(np.asarray(a.detach()) - w)) / max(np.max(np.abs(w)), 1e-30))
                           for a, w in zip(got, want) if w is not None))
