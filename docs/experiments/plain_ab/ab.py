"""Issue 57 experiment: the plain fed-back loop (a jitted step called from Python) with and without
this change's two host-side parts, in one process, on one GPU: (1) the returned scalar arithmetic
launched by the binding after the kernels, inside their graph, its results in the call's block
("returns in the binding"; off: the step's own executor is the compiled program's, and the
arithmetic is a kf_scalars launch of its own after each call), (2) torch result blocks recycled
("torch recycling"; off: ``executor._unused`` never hands back a torch block).  Methods of
benchmarks/loops.py; µs per step, median over runs of 60 steps between CUDA events (GPU time of
the stream: the host's time shows where it is longer), n = 1024 and 4096, both dtypes, CuPy and torch.

    PYTHONPATH=src python docs/experiments/plain_ab/ab.py out.md
"""
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "examples" / "solvers"))


def main(argv):
    import cupy as cp
    import torch
    import kfuse
    from kfuse.runtime import executor
    import loops
    out = Path(argv[0])
    sizes = [int(a) for a in argv[1:]] or [1024, 4096]
    real_unused = executor._unused

    def cupy_only(recycled, stream):
        item = real_unused(recycled, stream)
        return None if item is not None and item[4] is not None else item

    lines = [f"{torch.cuda.get_device_name()}; us per step (median of 7 runs of 60 steps)", "",
             "| method | dtype | n | framework | before (no returns in binding, no torch recycling) | returns in binding | both | device loop |",
             "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: |"]
    for n in sizes:
        for dtype in ("float32", "float64"):
            for method in ("cg", "sd", "lanczos", "power"):
                for fw in ("cupy", "torch"):
                    if fw == "torch":
                        xp = lambda v, dt: torch.as_tensor(np.asarray(v, dtype=dt), device="cuda")  # noqa: E731
                    else:
                        xp = lambda v, dt: cp.asarray(np.asarray(v, dtype=dt))  # noqa: E731
                    cells = []
                    for mode in ("before", "returns", "both", "device"):
                        state0 = loops.problem(method, n, dtype, xp)
                        step_fn = loops.METHODS[method][0]
                        jitted = kfuse.jit(step_fn)
                        executor._unused = real_unused if mode == "both" else cupy_only
                        if mode == "device":
                            run = lambda s, k: kfuse.fori_loop(0, k, lambda i, t: step_fn(*t), s)  # noqa: E731
                        else:
                            def run(s, k, jitted=jitted, mode=mode):
                                for _ in range(k):
                                    s = jitted(*s)
                                    if mode == "before":
                                        e = jitted.last
                                        e._executor = e.compiled.calls.executor
                                return s
                        state = run(state0, 3)
                        times = []
                        for _ in range(7):
                            torch.cuda.synchronize()
                            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                            if fw == "cupy":
                                a, b = cp.cuda.Event(), cp.cuda.Event()
                            a.record()
                            state = run(state0, 60)
                            b.record()
                            b.synchronize()
                            ms = a.elapsed_time(b) if fw == "torch" else cp.cuda.get_elapsed_time(a, b)
                            times.append(ms * 1e3 / 60)
                        cells.append(f"{statistics.median(times):.1f}")
                    executor._unused = real_unused
                    lines.append(f"| {method} | {dtype} | {n} | {fw} | " + " | ".join(cells) + " |")
                    print(lines[-1], flush=True)
    out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
