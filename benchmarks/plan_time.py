"""Time to the first implementation (the issue's Table 5 column): kfuse.compile of each example
with the calibrated model and no tuning store, best of 5, in one process after a warm-up compile
(imports, CUDA initialisation where there is a GPU, calibration file read once), NVRTC excluded.

    python benchmarks/plan_time.py
"""
import time
from pathlib import Path

import kfuse

ROOT = Path(__file__).resolve().parent.parent


def main():
    paths = sorted((ROOT / "examples").glob("*.kf"))
    kfuse.compile(paths[0], tuned=False)
    for path in paths:
        best = min(_timed(path) for _ in range(5))
        print(f"{path.stem:8s} {best:.3f} s", flush=True)


def _timed(path) -> float:
    t = time.perf_counter()
    kfuse.compile(path, tuned=False)
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
