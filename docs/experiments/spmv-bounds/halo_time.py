"""Halo recompute against two kernels (H100): each case fused (pinned) and apart (pinned), CUDA-event
medians, and which one the default plan is; copy bandwidth in the same run."""
import sys, statistics
sys.path.insert(0, "tests")
import numpy as np, cupy as cp, kfuse
from test_gpu_halo import GPU_CASES, _fused

def bw():
    a = cp.empty(1 << 28, np.uint8); b = cp.empty_like(a)
    for _ in range(3): b[...] = a
    e0, e1 = cp.cuda.Event(), cp.cuda.Event(); ts = []
    for _ in range(10):
        e0.record(); b[...] = a; e1.record(); e1.synchronize(); ts.append(cp.cuda.get_elapsed_time(e0, e1))
    return 2 * a.nbytes / (statistics.median(ts) * 1e-3) / 1e9

def timed(prog, args, reps=30):
    for _ in range(3): prog(**args)
    cp.cuda.Device().synchronize()
    ts = []
    for _ in range(reps):
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        e0.record(); prog(**args); e1.record(); e1.synchronize()
        ts.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3)
    return statistics.median(ts)

BW = bw()
print(f"copy bandwidth {BW:.0f} GB/s", flush=True)
cases = [("lap7_lap7", [(64,) * 3, (128,) * 3, (256,) * 3]), ("lap7_axpy", [(64,) * 3, (256,) * 3]),
         ("lap7v_lap7", [(128,) * 3, (256,) * 3]), ("lap5_lap5", [(1024, 1024), (4096, 4096)]),
         ("lap27v_lap27", [(128,) * 3])]
for dtype in ("float32", "float64"):
    for case, shapes in cases:
        script = GPU_CASES[case][0]
        fused = _fused(case, dtype)
        for shape in shapes:
            n = int(np.prod(shape))
            default = kfuse.compile(script, dtype=dtype, sizes={"u.len": n})
            apart = kfuse.compile(script, dtype=dtype, fuse=False)
            rng = np.random.default_rng(0)
            args = {}
            for v in fused.program.inputs:
                args[v.name] = float(rng.uniform(0.5, 2)) if v.type == "scalar" else cp.asarray(
                    rng.uniform(0.5, 2.0, shape) if v.name == "c" else rng.standard_normal(shape), dtype=dtype)
            t_f = timed(fused, args)
            t_d = timed(default, args)
            t_a = timed(apart, args)
            kd = len(default.kernels)
            print(f"{dtype} {case:13s} {'x'.join(map(str, shape)):12s} fused {t_f:8.1f} us | default ({kd} kernel{'s' if kd > 1 else ''}, "
                  f"{'halo' if 'kf_halo_' in default.cuda_source else 'apart'}) {t_d:8.1f} us | apart {t_a:8.1f} us | traffic limit {(3 if 'axpy' in case or 'v_' in case else 2) * n * np.dtype(dtype).itemsize / BW / 1e3:7.1f} us", flush=True)
