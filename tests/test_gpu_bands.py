"""gemv over row bands (the `band` variants: R rows x NC columns, NC shorter than the row, a block
walking its band along j and adding its row sums) on the GPU (-m gpu): every band shape of the
three gemv forms against the float64 reference, outputs poisoned with NaN, fresh random inputs, at
sizes whose rows no strip holds (bands are a fallback there), several bands per row, the last one
partial."""
import pytest

import kfuse

from test_gpu_examples import TOL, run_checked

pytestmark = pytest.mark.gpu

FORMS = {
    "plain": "matrix A[m, n]; vector x[n], q[m]; input A, x; q = gemv(A, x); return q;",
    "alpha": "scalar a; matrix A[m, n]; vector x[n], q[m]; input a, A, x; q = gemv(a, A, x); return q;",
    "alpha-beta": "scalar a, b; matrix A[m, n]; vector x[n], y[m], q[m]; input a, b, A, x, y; "
                  "q = gemv(a, A, x, b, y); return q;",
}


def band_plans(prog):
    """One plan per band shape and loop axis of the program's gemv, in the model's order."""
    seen, out = set(), []
    for plan in prog.search.plans():
        [kernel] = plan.kernels
        if kernel.calls[0].variant.name == "band" and (plan.summary(), kernel.loop) not in seen:
            seen.add((plan.summary(), kernel.loop))
            out.append(plan)
    return out


@pytest.mark.parametrize("dtype, m, n", [("float32", 33, 20001), ("float32", 1000, 16385),
                                         ("float64", 257, 9000), ("float64", 33, 16385)])
@pytest.mark.parametrize("form", FORMS)
def test_every_band_shape_matches_reference(form, dtype, m, n):
    prog = kfuse.compile(FORMS[form], dtype=dtype, tuned=False, sizes={"m": m, "n": n})
    plans = band_plans(prog)
    assert len(plans) >= 8, [p.summary() for p in plans]       # BY x R x NC (x the loop axes it takes)
    failures = []
    for plan in plans:
        errors = run_checked(prog.with_plan(plan), {"m": m, "n": n})
        if not all(e < TOL[dtype] for e in errors.values()):
            failures.append((plan.describe(), errors))
    assert not failures, failures[:3]
