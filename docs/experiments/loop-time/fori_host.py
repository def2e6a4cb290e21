"""Where a fori_loop call's fixed cost goes (CG n = 1024): GPU time of calls of 2, 30 and 120 steps,
the host's time per call, and a cProfile of 50 calls of 120 steps."""
import sys, time, statistics, cProfile, pstats, io
sys.path.insert(0, "benchmarks")
import numpy as np, cupy as cp
import loops as L
import kfuse

for dtype in ["float32", "float64"]:
    m, n = "cg", 1024
    state = L.problem(m, n, dtype, lambda v, d: cp.asarray(v, dtype=d))
    step = L.METHODS[m][0]
    body = lambda i, s: step(*s)
    for steps in (2, 30, 120, 480):
        kfuse.fori_loop(0, steps, body, state); cp.cuda.Device().synchronize()
        gpu, host = [], []
        for _ in range(15):
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            cp.cuda.Device().synchronize()
            e0.record()
            t0 = time.perf_counter()
            kfuse.fori_loop(0, steps, body, state)
            t1 = time.perf_counter()
            e1.record(); e1.synchronize()
            gpu.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3)
            host.append((t1 - t0) * 1e6)
        print(f"{dtype} cg n={n} steps {steps}: GPU {statistics.median(gpu):8.1f} us ({statistics.median(gpu)/steps:6.2f}/step)"
              f"  host call {statistics.median(host):7.1f} us", flush=True)
    # the host's own: a call while the GPU is busy
    pr = cProfile.Profile()
    cp.cuda.Device().synchronize()
    pr.enable()
    for _ in range(50):
        kfuse.fori_loop(0, 120, body, state)
    pr.disable()
    cp.cuda.Device().synchronize()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(30)
    print("\n".join(s.getvalue().splitlines()[:60]))
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(20)
    print("\n".join(s.getvalue().splitlines()[:40]), flush=True)
