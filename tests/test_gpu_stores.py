"""float64 16-byte stores by lane pairs (``kf_store16_paired``, codegen/prelude.cuh) on the GPU:
outputs at every 8-byte offset of a larger poisoned buffer (16-byte aligned or not, pairs 32-byte
aligned or not), sizes ending mid-quad and mid-pair; results against the float64 reference and
not one write outside the output (run with -m gpu)."""
import itertools

import numpy as np
import pytest

import kfuse
from kfuse.cost.store import SHIPPED
from kfuse.reference import device_case, evaluate, relative_error

from conftest import ROOT

pytestmark = pytest.mark.gpu
STORES = ("quad_store", "qtile_store")      # the routines that store through put4
_plans = {}


def quad_program(name: str, dtype: str):
    """examples/NAME.kf with the first plan (model order, the shipped H100 calibration's on every
    GPU) that stores through put4: among the first 20000, only those with a call whose variant
    has such a store routine are generated (float64 GEMVER's first is far down the order)."""
    key = (name, dtype)
    if key not in _plans:
        c = kfuse.compile(ROOT / "examples" / f"{name}.kf", dtype=dtype, tuned=False,
                          calibration=SHIPPED / "H100.json")
        for plan in itertools.islice(c.search.plans(), 20000):
            if not any(r.fn in STORES for k in plan.kernels for kc in k.calls for r in kc.variant.routines):
                continue
            x = c.with_plan(plan)
            if any(f in x.cuda_source for f in STORES):
                _plans[key] = x
                break
        else:
            raise AssertionError(f"{name}: no plan of the first 20000 stores through put4")
    return _plans[key]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("offset", [0, 1, 2, 3])
@pytest.mark.parametrize("name,size", [("sscal", 33), ("sscal", 4097), ("waxpby", 1000), ("waxpby", 8),
                                       ("madd", 33), ("madd", 200), ("gemver", 67)])
def test_stores_at_every_offset(name, size, offset, dtype):
    import cupy as cp
    x = quad_program(name, dtype)
    p = x.program
    dims = {d.id: size for d in p.dims}
    dev, host, poisoned = device_case(p, dims, dtype, seed=100 + size + offset)
    bufs, outs = {}, {}
    for v in p.outputs:
        shape = poisoned[v.name].shape
        buf = cp.full(int(np.prod(shape)) + offset + 9, np.nan, dtype=dtype)
        bufs[v.name] = buf
        outs[v.name] = buf[offset:offset + int(np.prod(shape))].reshape(shape)
    got = x(out=outs, sync=True, **dev)
    got = got if isinstance(got, tuple) else (got,)
    ref, mag = evaluate(p, host), evaluate(p, host, magnitude=True)
    for v, g in zip(p.outputs, got):
        err = relative_error(cp.asnumpy(g), ref[v.id], mag[v.id])
        assert err < (1e-12 if dtype == "float64" else 1e-5), (v.name, err)
        whole = cp.asnumpy(bufs[v.name])
        n = g.size
        assert np.isnan(whole[:offset]).all() and np.isnan(whole[offset + n:]).all(), \
            f"{v.name}: a write outside the output"
