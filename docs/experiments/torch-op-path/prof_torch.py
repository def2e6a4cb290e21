"""Where a fed-back CG step's time goes at n = 1024 (float32): kfuse's plain call with CuPy arrays
and torch tensors, the jitted step inside torch.compile(fullgraph=True) (kfuse::call as a
torch.library.custom_op), torch eager: wall per step, cProfile, torch.profiler op counts.
Run from the repository root: PYTHONPATH=src python prof_torch.py cg"""
import cProfile, pstats, sys, time, io
sys.path.insert(0, "benchmarks")
import numpy as np, torch, cupy as cp
import kfuse
from loops import METHODS, problem, _dynamo

def per_step(run, state, steps=200):
    run(state, 20); torch.cuda.synchronize()
    t = time.perf_counter(); run(state, steps); torch.cuda.synchronize()
    return (time.perf_counter() - t) / steps * 1e6

def prof(label, run, state, steps=300, top=28):
    run(state, 20); torch.cuda.synchronize()
    pr = cProfile.Profile(); pr.enable(); run(state, steps); torch.cuda.synchronize(); pr.disable()
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(top)
    print(f"===== {label}: tottime"); print(s.getvalue()[-9000:])

def kernels(label, run, state):
    from torch.profiler import profile, ProfilerActivity
    run(state, 5); torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as p:
        run(state, 10); torch.cuda.synchronize()
    print(f"===== {label}: ops over 10 steps")
    print(p.key_averages().table(sort_by="count", row_limit=25, max_name_column_width=60))

for method in sys.argv[1:] or ["cg"]:
    for dtype in ["float32"]:
        st_t = problem(method, 1024, dtype, lambda v, d: torch.tensor(v, dtype=getattr(torch, d), device="cuda"))
        st_c = problem(method, 1024, dtype, lambda v, d: cp.asarray(v, dtype=d))
        jitted = kfuse.jit(METHODS[method][0])
        def plain(state, steps):
            for _ in range(steps): state = jitted(*state)
            return state
        _dynamo()
        comp = torch.compile(lambda *s: jitted(*s), dynamic=False, fullgraph=True)
        def compiled(state, steps):
            for _ in range(steps): state = comp(*state)
            return state
        eager_step = METHODS[method][0]
        def eager(state, steps):
            for _ in range(steps): state = eager_step(*state)
            return state
        for lab, run, st in [("plain cupy", plain, st_c), ("plain torch", plain, st_t), ("in torch.compile", compiled, st_t), ("torch eager", eager, st_t)]:
            print(f"{method} {dtype} {lab}: {per_step(run, st):.1f} us/step wall")
        prof(f"{method} plain torch", plain, st_t)
        prof(f"{method} in torch.compile", compiled, st_t, top=40)
        kernels(f"{method} in torch.compile", compiled, st_t)
        kernels(f"{method} plain torch", plain, st_t)
