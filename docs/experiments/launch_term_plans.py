"""How many first choices a plan-time launch term of a graph node would change (issue 57 item 3;
CPU, no measurement): every example and 60 random scripts (seeds 5000-5059) planned with the
shipped H100 calibration as it is (launch 9.3 us, clear 4.9 us a kernel: launches timed alone from
Python) and with launch 1.52 us and clear 1.5 us (a step's graph node, cost/queued.py), at
n = 1024, 4096 and 8192, both dtypes.

    PYTHONPATH=src python docs/experiments/launch_term_plans.py
"""
import glob, sys, json
from dataclasses import replace
import kfuse
from kfuse.cost.calibrated import CalibratedModel
from kfuse.cost.store import read_file
from kfuse.cost import calibrated
from kfuse.frontend.random_scripts import random_script
lib = kfuse.load_library()
out = {}
for dtype in ("float32", "float64"):
    cal = next(c for c in read_file(calibrated.SHIPPED / "H100.json") if c.dtype == dtype)
    a, b = CalibratedModel(cal), CalibratedModel(replace(cal, launch_ns=1520.0, clear_ns=1500.0))
    scripts = [open(p).read() for p in sorted(glob.glob("examples/*.kf"))]
    scripts += [random_script(lib, seed, functions=frozenset({"scal", "axpy", "axpby", "vadd", "dot", "gemv", "gemtv", "ger", "madd"})).text for seed in range(5000, 5060)]
    for n in (1024, 4096, 8192):
        changed, fewer, more, total = 0, 0, 0, 0
        for s in scripts:
            from kfuse.bench import harness
            p0 = kfuse.compile(s, dtype=dtype, calibration=False, tuned=False, fuse=False)
            dims = harness.sequence_dims(p0.program, n, n * n // 16)
            sizes = {d.name: dims[d.id] for d in p0.program.dims if d.literal is None}
            pa = kfuse.compile(s, dtype=dtype, calibration=a, tuned=False, sizes=sizes)
            pb = kfuse.compile(s, dtype=dtype, calibration=b, tuned=False, sizes=sizes)
            total += 1
            ka = [tuple(c.call.function.name for c in k.calls) for k in pa.plan.kernels]
            kb = [tuple(c.call.function.name for c in k.calls) for k in pb.plan.kernels]
            if ka != kb:
                changed += 1
                fewer += len(kb) < len(ka); more += len(kb) > len(ka)
        print(dtype, n, f"{changed}/{total} plans change; more kernels {more}, fewer {fewer}", flush=True)
