import sys, time
sys.path.insert(0, "benchmarks")
import numpy as np, cupy as cp
import kfuse, loops as bl
from kfuse.runtime import loop as rl
n = int(sys.argv[1]); m = sys.argv[2]
st = bl.problem(m, n, "float32", lambda v, d: cp.asarray(v, dtype=d))
step = bl.METHODS[m][0]
body = lambda i, s: step(*s)
for cl in (64, 128, 256, 512):
    rl.CHUNK_LAUNCHES = cl
    for steps in (30, 72, 300):
        for b in kfuse.loops._BODIES.values(): b.instances.clear()
        kfuse.fori_loop(0, steps, body, st); cp.cuda.Device().synchronize()
        ts = []
        for _ in range(3):
            t = time.perf_counter(); kfuse.fori_loop(0, steps, body, st); cp.cuda.Device().synchronize(); ts.append(time.perf_counter() - t)
        print(f"{m} n={n} chunk_launches={cl} steps={steps}: {min(ts)/steps*1e6:.1f} us/step", flush=True)
