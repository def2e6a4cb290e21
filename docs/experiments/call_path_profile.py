"""Where a plain call's host time goes, step by step (H100, n = 1024 / N = 2^20).
Run: PYTHONPATH=src python3 docs/experiments/call_path_profile.py"""
import cupy as cp
import numpy as np

import kfuse
from kfuse.bench.harness import sequence_dims
from kfuse.reference import device_case
from kfuse.runtime import driver

from explore_util import host_us_per_call


per = host_us_per_call      # n = 3000 calls each


for name in ("sscal", "bicgk", "gemver", "axpydot"):
    prog = kfuse.compile(f"examples/{name}.kf")
    p = prog.program
    dims = sequence_dims(p, 1024, 2**20)
    dev, host, outs = device_case(p, dims, "float32", 0)
    prog(**dev)
    ex = prog.executor
    key, arrays, scalars, torch_in = ex._read(dev, None, cp)
    b = ex.bindings[key]
    s = ex._stream(None, b.device, False, cp)
    own, block = ex._allocate(b, False, cp)
    tmp = ex._temporaries(b, s, cp)
    in_ptrs = [a.data.ptr for a in arrays]
    rows = {
        "whole plain call": per(lambda: prog(**dev)),
        "whole repeated call (out=)": per(lambda: prog(out=outs, **dev)),
        "bound call": per(prog.bind(**dev)),
        "_read": per(lambda: ex._read(dev, None, cp)),
        "_stream": per(lambda: ex._stream(None, b.device, False, cp)),
        "_allocate": per(lambda: ex._allocate(b, False, cp)),
        "_temporaries": per(lambda: ex._temporaries(b, s, cp)),
        "patch": per(lambda: b.patch(in_ptrs, [], own, tmp, scalars)),
        "is_capturing": per(lambda: driver.is_capturing(s)),
        "launch_all (direct)": per(lambda: b.launch_all(s)),
        "_launch (graph when several)": per(lambda: ex._launch(b, s, in_ptrs, [], own, tmp, scalars)),
        "_result": per(lambda: ex._result(b, block, None)),
    }
    g = ex.graphs.get(id(b))
    print(f"{name}: {b.launch_count} launch(es); graphs: "
          + (f"{len(g.execs)} captured, failed={g.failed}" if g else "none"))
    for k, v in rows.items():
        print(f"  {k:32s} {v:7.2f} us")
