import sys
sys.path.insert(0, "benchmarks")
import cupy as cp
import loops as L
import kfuse
m, n, dtype = sys.argv[1], int(sys.argv[2]), sys.argv[3]
state = L.problem(m, n, dtype, lambda v, d: cp.asarray(v, dtype=d))
step = L.METHODS[m][0]
body = lambda i, s: step(*s)
for _ in range(3):
    kfuse.fori_loop(0, 20, body, state)
cp.cuda.Device().synchronize()
