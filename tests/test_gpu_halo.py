"""A stencil after a stencil (or after a map) in one kernel, on the GPU (run with -m gpu): the
halo recompute (ir/halo.py, codegen/halo.py; CPU tests: tests/test_halo.py).  Each case's fused
plan (made at a small size by a model without the recompute's latency, and pinned: it runs at every size) against
the float64 NumPy reference by relative error, on grids of 1, 2, 33 and 257 per side (2-D) and
small odd 3-D grids, both dtypes, fresh random data, outputs given as NaN-poisoned arrays."""
import numpy as np
import pytest

import kfuse
from kfuse.reference import evaluate, relative_error

from test_halo import CASES, FUSING, SMALL

pytestmark = pytest.mark.gpu
TOL = {"float32": 1e-5, "float64": 1e-12}
GPU_CASES = {**CASES,
             "lap5_axpy": ("vector x, u, v, w;\nscalar a;\ninput a, x, u;\nv = axpy(a, x, u);\nw = lap5(v);\nreturn w;\n",
                           ["axpy", "lap5"]),
             "lap27v_lap27": ("vector c, u, v, w;\ninput c, u;\nv = lap27(u);\nw = lap27v(c, v);\nreturn w;\n",
                              ["lap27", "lap27v"])}
CASES_2D = sorted(k for k in GPU_CASES if k.startswith("lap5"))
CASES_3D = sorted(k for k in GPU_CASES if not k.startswith("lap5"))
SHAPES_2D = [(1, 1), (2, 2), (33, 33), (257, 257), (3, 257), (257, 5)]
SHAPES_3D = [(1, 1, 1), (2, 2, 2), (3, 5, 7), (5, 17, 33), (33, 17, 5), (7, 1, 9), (33, 33, 33)]


def _fused(case: str, dtype: str):
    script, fused = GPU_CASES[case]
    prog = kfuse.compile(script, dtype=dtype, calibration=FUSING, tuned=False, sizes=SMALL)
    groups = [sorted(kc.call.function.name for kc in k.spec.calls) for k in prog.kernels]
    assert fused in groups, f"{case}: the model did not fuse at {SMALL}: {groups}"
    assert "kf_halo_" in prog.cuda_source
    return prog.with_plan(prog.plan)        # pinned: this plan at every size


def _run_and_check(case: str, shape: tuple, dtype: str, seed: int) -> None:
    import cupy as cp
    prog = _fused(case, dtype)
    p = prog.program
    rng = np.random.default_rng(seed)
    host: dict = {}
    dev: dict = {}
    for v in p.inputs:
        if v.type == "scalar":
            a = float(np.dtype(dtype).type(rng.uniform(-2.0, 2.0)))
            host[v.name] = dev[v.name] = a
            continue
        x = (rng.uniform(0.5, 2.0, shape) if v.name == "c" else rng.standard_normal(shape)).astype(dtype)
        host[v.name], dev[v.name] = x.astype(np.float64), cp.asarray(x)
    outs = {v.name: cp.full(shape, np.nan, dtype=dtype) for v in p.outputs if v.type != "scalar"}
    got = prog(out=outs, **dev)
    cp.cuda.Device().synchronize()
    got = got if isinstance(got, tuple) else (got,)
    ref, mag = evaluate(p, host), evaluate(p, host, magnitude=True)
    for v, g in zip(p.outputs, got):
        if v.type == "scalar":
            err = abs(float(g) - float(ref[v.id])) / max(float(mag[v.id]), 1e-300)
            assert err <= TOL[dtype] * 10, f"{case} {shape} {dtype}: {v.name} relative error {err:.2e}"
            continue
        assert g is outs[v.name] and g.shape == shape
        err = relative_error(cp.asnumpy(g), ref[v.id], mag[v.id])
        assert err <= TOL[dtype], f"{case} {shape} {dtype}: {v.name} relative error {err:.2e}"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", SHAPES_2D)
@pytest.mark.parametrize("case", CASES_2D)
def test_2d_halo_recompute(case, shape, dtype):
    _run_and_check(case, shape, dtype, seed=sum(shape))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", SHAPES_3D)
@pytest.mark.parametrize("case", CASES_3D)
def test_3d_halo_recompute(case, shape, dtype):
    _run_and_check(case, shape, dtype, seed=sum(shape) + 1)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_halo_recompute_matches_the_two_kernel_plan(dtype):
    """The fused kernel and the plan of two kernels (the default model's at 65^3) agree on 65^3."""
    import cupy as cp
    script = GPU_CASES["lap7_lap7"][0]
    fused = _fused("lap7_lap7", dtype)
    apart = kfuse.compile(script, dtype=dtype, calibration=False, tuned=False)
    assert len(apart.kernels) == 2
    apart = apart.with_plan(apart.plan)
    u = cp.asarray(np.random.default_rng(9).standard_normal((65, 65, 65)).astype(dtype))
    a, b = fused(u=u), apart(u=u)
    scale = float(cp.abs(b).max())
    assert float(cp.abs(a - b).max()) <= TOL[dtype] * 10 * scale
