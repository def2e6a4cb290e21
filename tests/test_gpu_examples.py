"""Every example on the GPU against a float64 NumPy reference (run with -m gpu)."""
import numpy as np
import pytest

import kfuse
from kfuse.reference import device_case, evaluate, relative_error

from conftest import EXAMPLES

pytestmark = pytest.mark.gpu
SIZES = [1, 31, 33, 1000, 4097, 8192]
TOL = {"float32": 1e-5, "float64": 1e-12}
_compiled = {}


def compiled(path, dtype):
    key = (path, dtype)
    if key not in _compiled:
        _compiled[key] = kfuse.compile(path, dtype=dtype)
    return _compiled[key]


def has_matrix(prog):
    return any(v.type == "matrix" for v in prog.program.values)


def run_checked(prog, size, seed=None, torch_inputs=False):
    """``size``: every dimension's, or a dict of sizes by dimension name."""
    import cupy as cp
    p = prog.program
    dims = {d.id: size[d.name] if isinstance(size, dict) else size for d in p.dims}
    # the reference sees exactly the values the GPU sees (rounded to the dtype)
    dev, host, poisoned = device_case(p, dims, prog.dtype, seed)
    if torch_inputs:
        import torch
        dev = {k: (torch.as_tensor(cp.asnumpy(v), device="cuda") if hasattr(v, "ndim") else v)
               for k, v in dev.items()}
    got = prog(out=poisoned, sync=True, **dev)
    got = got if isinstance(got, tuple) else (got,)
    ref = evaluate(p, host)
    mag = evaluate(p, host, magnitude=True)
    errors = {}
    for v, g in zip(p.outputs, got):
        assert g is poisoned[v.name]
        errors[v.name] = relative_error(cp.asnumpy(g), ref[v.id], mag[v.id])
    return errors


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_matches_reference(path, size, dtype):
    errors = run_checked(compiled(path, dtype), size)
    assert all(e < TOL[dtype] for e in errors.values()), errors


def _vector_examples():
    """The examples without a matrix (2^26 entries apply to vector sequences); parsed on the CPU."""
    from kfuse.frontend import parse_script
    lib = kfuse.load_library()
    return [p for p in EXAMPLES
            if not any(v.type == "matrix" for v in parse_script(p.read_text(), lib, str(p)).values)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("path", _vector_examples(), ids=lambda p: p.stem)
def test_large_vectors(path, dtype):
    prog = compiled(path, dtype)
    assert not has_matrix(prog)
    errors = run_checked(prog, 2**26)
    assert all(e < TOL[dtype] for e in errors.values()), errors


def test_torch_inputs():
    pytest.importorskip("torch")
    errors = run_checked(compiled(EXAMPLES[0].parent / "gemver.kf", "float32"), 1000, torch_inputs=True)
    assert all(e < 1e-5 for e in errors.values()), errors


def test_repeated_runs_agree_with_fresh_data():
    prog = compiled(EXAMPLES[0].parent / "bicgk.kf", "float64")
    for seed in range(3):
        errors = run_checked(prog, 777, seed=seed)
        assert all(e < 1e-12 for e in errors.values()), errors


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("size", [135, 1000])
@pytest.mark.parametrize("name", ["bicgk", "gemver", "atax", "gesummv", "sgemv", "axpydot"])
def test_bound_call_repeats_on_new_data(name, size, dtype):
    """One bound call run again and again (reduced outputs cleared before each run), with fresh
    data copied into its inputs and NaN-poisoned outputs each time, is right every time."""
    import cupy as cp
    prog = compiled(EXAMPLES[0].parent / f"{name}.kf", dtype)
    p = prog.program
    if not has_matrix(prog):
        size *= 1000
    dims = {d.id: size for d in p.dims}
    dev, host0, outs = device_case(p, dims, dtype, 0)
    bound = prog.bind(out=outs, **dev)
    for seed in range(1, 4):
        fresh, host, _ = device_case(p, dims, dtype, seed)
        for k, v in fresh.items():
            if hasattr(v, "ndim"):
                dev[k][...] = v
        for o in outs.values():
            o.fill(np.nan)
        # arrays are the fresh ones; scalars stay those bound (seed 0)
        host = {k: (v if isinstance(v, np.ndarray) else host0[k]) for k, v in host.items()}
        bound(sync=True)
        ref, mag = evaluate(p, host), evaluate(p, host, magnitude=True)
        for v in p.outputs:
            err = relative_error(cp.asnumpy(outs[v.name]), ref[v.id], mag[v.id])
            assert err < TOL[dtype], (seed, v.name, err)


# one conjugate-gradient step (examples/solvers/cg.py as traced): a gemv, then the dot products
# adding into cleared scalars in later kernels, so the first kernel touches nothing the fills clear
CG_STEP = """matrix A;
vector x, r, p, q, x1, r1, p1;
scalar rr, pq, rr1;
input A, x, r, p, rr;
q = gemv(A, p);
pq = dot(p, q);
x1 = axpy(rr / pq, p, x);
r1 = axpy(-(rr / pq), q, r);
rr1 = dot(r1, r1);
p1 = axpy(rr1 / rr, p, r1);
return x1, r1, p1, rr1;
"""


@pytest.mark.parametrize("pdl", ["1", "0"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ["bicgk", "gemver", "atax", "sgemvt", "gesummv", "axpydot", "cg_step"])
def test_own_outputs_bound_and_repeated(name, dtype, pdl, monkeypatch):
    """Without out=, reduced outputs live side by side in one buffer cleared by one fill before
    the first kernel, which starts while the fill runs (PDL, on compute capability 9.0 and later,
    unless KFUSE_PDL=0; a fill after a fill too), and each later kernel starts while the one
    before it runs and waits for it: a bound call run repeatedly on fresh data is right every
    time."""
    import cupy as cp
    monkeypatch.setenv("KFUSE_PDL", pdl)
    prog = compiled(CG_STEP if name == "cg_step" else EXAMPLES[0].parent / f"{name}.kf", dtype)
    p = prog.program
    dims = {d.id: (1000 if has_matrix(prog) else 100_003) for d in p.dims}
    dev, host0, _ = device_case(p, dims, dtype, 0)
    bound = prog.bind(**dev)
    if name == "cg_step":       # the case of a first kernel launched early that waits at its end,
        # after one fill clearing both the returned block (rr1) and the temporaries (pq)
        assert len(bound.binding.fills_before[0]) == 1 and not bound.binding.artifact.kernels[0].launch.waits
        assert bound.binding.own_cleared and bound.binding.tmp_cleared
    dependent = [L.dependent for L in bound.binding.kernel_launches]
    if pdl == "0" or int(cp.cuda.Device().compute_capability) < 90:
        assert not any(dependent)
    else:      # every kernel after fills (it waits before touching a cleared output, or at its
        # end), and every later kernel that waits for the one before it
        assert dependent == [bool(fills) or (i > 0 and k.launch.waits)
                             for i, (fills, k) in enumerate(zip(bound.binding.fills_before,
                                                                bound.binding.artifact.kernels))]
        assert all(dependent[1:])                   # every later kernel reads what one before wrote
        assert dependent[0] == bool(bound.binding.fills_before[0])   # the first waits for a fill if any
        names = [L.name for L, _ in bound.binding.launches]
        assert [L.dependent for L, _ in bound.binding.launches if L.name == "kf_fill"] == [
            k > 0 and names[k - 1] == "kf_fill" for k, n in enumerate(names) if n == "kf_fill"]
    got = bound.result if isinstance(bound.result, tuple) else (bound.result,)
    for seed in range(1, 4):
        fresh, host, _ = device_case(p, dims, dtype, seed)
        for k, v in fresh.items():
            if hasattr(v, "ndim"):
                dev[k][...] = v
        for g in got:
            g.fill(np.nan)
        host = {k: (v if isinstance(v, np.ndarray) else host0[k]) for k, v in host.items()}
        bound(sync=True)
        ref, mag = evaluate(p, host), evaluate(p, host, magnitude=True)
        for v, g in zip(p.outputs, got):
            err = relative_error(cp.asnumpy(g), ref[v.id], mag[v.id])
            assert err < TOL[dtype], (seed, v.name, err)
