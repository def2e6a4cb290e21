"""Registers of a CG step's gemv standalone and as the head of a merged run (nvcc --resource-usage)."""
import sys, subprocess, tempfile, os
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
print([ (k.name, k.threads, k.smem) for k in ks])
print([ (k.launch.kernel, k.launch.threads) for k in r.kernels])
head = ks[0]
shape = merged.Shape(tuple(ks), (64,) + (1,) * (len(ks) - 1), clears=1, indexed=True, head=True)
text = merged.kernel_text(shape, np.dtype(dtype), "kf_merged0")
src = r.persistent_source(text)
d = tempfile.mkdtemp()
for name, s in (("merged", src), ("plain", r.artifact.source)):
    if s is None: continue
    open(f"{d}/{name}.cu", "w").write(s)
    p = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-std=c++17", "--resource-usage", "-o", f"{d}/{name}.cubin", f"{d}/{name}.cu"], capture_output=True, text=True)
    print(name, "\n".join(l for l in p.stderr.splitlines() if "registers" in l or "Function properties" in l or "Compiling entry" in l))
