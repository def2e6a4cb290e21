import sys
sys.path.insert(0, "tests"); sys.path.insert(0, "examples/solvers")
import numpy as np
from kfuse import loops
from kfuse.runtime import merged
import test_loops as T
import cg
n, dtype = int(sys.argv[1]), sys.argv[2]
Ah, vh, zh = np.zeros((n, n), dtype), np.zeros(n, dtype), np.zeros((), dtype)
body, _ = loops._body(cg.cg_body, False, (Ah, zh, vh, vh, vh, zh), "while_loop")
_, r = T._persistent_source(body, n, dtype)
ks = T._kernels_of(r, dtype)
shape = merged.Shape(tuple(ks[1:]), (1,) * (len(ks) - 1), clears=1, indexed=True)
text = merged.kernel_text(shape, np.dtype(dtype), "kf_merged1")
src = r.persistent_source(text)
open(f"/tmp/merged_{n}_{dtype}.cu", "w").write(src)
for k in r.kernels:
    print(k.launch.kernel, k.launch.threads, getattr(k.launch, "iters", None))
sums = merged.reductions(r.kernels[1:])
shape = merged.Shape(tuple(ks[1:]), (1,) * (len(ks) - 1), clears=1, indexed=True, groups=(4, 4, 1), block=256, **sums)
print(merged.kernel_text(shape, np.dtype(dtype), "kf_merged1"))
