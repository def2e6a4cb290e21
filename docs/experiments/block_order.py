"""Block orders of multi-kernel plans (runtime/order.py): every combination of the kernels' order
arguments timed on the examples' first-choice plans (n = 8192, float32), with the L2 as the call
before left it (calls back to back) and read over (flushed of this call's arrays) before each
call; beside them the order the model chooses.

    python docs/experiments/block_order.py [NAME ...]
"""
import itertools
import os
import sys
from pathlib import Path

import numpy as np

import kfuse
from kfuse.bench.harness import copy_bandwidth, device_timer, l2_bytes
from kfuse.reference import device_case
from kfuse.runtime.gpu import cupy
from kfuse.runtime.order import launch_orders
from kfuse.runtime.timing import median_us

ROOT = Path(__file__).resolve().parents[2]     # the repository (this file is docs/experiments/*.py)


def main(names):
    cp = cupy()
    print(f"copy bandwidth {copy_bandwidth(2**30, device_timer(30, 3)):.0f} GB/s; L2 {l2_bytes() >> 20} MB",
          flush=True)
    for name in names:
        prog = kfuse.compile(ROOT / "examples" / f"{name}.kf")
        p = prog.program
        dims = {d.id: 8192 for d in p.dims}
        dev, _, _ = device_case(p, dims, "float32", 0)
        os.environ.pop("KFUSE_ORDER", None)
        chosen = [o & 3 for o in launch_orders(prog, dims, cp.cuda.Device().id, pdl=False)]
        print(f"{name}: {len(prog.kernels)} kernel(s) {[k.spec.name for k in prog.kernels]}; model chooses {chosen}",
              flush=True)
        ref = None
        rows = []
        for combo in itertools.product(*[(0, 1, 2, 3) if k.launch.nesting == 2 else (0, 1) for k in prog.kernels]):
            os.environ["KFUSE_ORDER"] = ",".join(map(str, combo))
            bound = prog.bind(**dev)
            got = [cp.asnumpy(x).astype(np.float64) for x in (bound(sync=True) if isinstance(bound.result, tuple)
                                                              else (bound(sync=True),))]
            if ref is None:
                ref = got
            err = max(np.linalg.norm(g - r) / np.linalg.norm(r) for g, r in zip(got, ref))
            t = median_us(bound, reps=50)
            tf = median_us(bound, reps=50, cold_l2=True)
            rows.append((t, tf, combo, err))
            print(f"  orders {combo}: {t:7.1f} us back to back, {tf:7.1f} us after an L2 read-over; "
                  f"diff to (0,..) {err:.1e}", flush=True)
        os.environ.pop("KFUSE_ORDER", None)
        best = min(rows)
        print(f"  best back to back {best[0]:.1f} {best[2]}; best flushed {min(rows, key=lambda r: r[1])[1]:.1f} "
              f"{min(rows, key=lambda r: r[1])[2]}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["gemver", "atax", "sgemvt"])
