"""``kfuse bench --per-call``: what a call costs from a Python loop, the way a solver calls it.

For every sequence, dtype and size class, each contender is checked against the float64 reference
first (as in ``kfuse bench``), then timed as wall time per call: ``calls`` calls in a Python loop,
one synchronisation at the end, the median of ``rounds`` such loops.  Contenders: kfuse's plain
call ``prog(**inputs)`` (fresh outputs each call), its repeated call with the same arrays
(``out=`` given: graph replay), its bound call, cuBLAS through CuPy, torch eager, torch.compile
(default and ``mode="reduce-overhead"``).  kfuse's GPU time per call (CUDA events, warm L2, as
the loop sees it) and the copy bandwidth of the run stand beside them.
"""
from __future__ import annotations

import csv
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import KfuseError
from ..runtime.timing import quartiles
from . import peers
from .harness import (ERROR, OK, Record, sequence_inputs, check_then_time, copy_bandwidth, device_timer,
                      sequence_dims)
from .records import COLOURS, CUBLAS, KFUSE, TORCH_COMPILE as COMPILE, TORCH_EAGER as EAGER, display_name

PLAIN, REPEATED, BOUND = "kfuse plain", "kfuse repeated", "kfuse bound"
REDUCE = "torch.compile reduce-overhead"
COLUMNS = (PLAIN, REPEATED, BOUND, CUBLAS, EAGER, COMPILE, REDUCE)
SIZE_CLASSES = ((1024, 2**20), (8192, 2**26))


@dataclass
class PerCallRow:
    sequence: str
    dtype: str
    n: int
    N: int
    gpu_us: float | None
    kernels: int
    records: dict[str, Record] = field(default_factory=dict)

    def us(self, contender: str) -> float | None:
        r = self.records.get(contender)
        return r.time_us if r is not None and r.status == OK else None


def wall_timer(calls: int, rounds: int, warmup: int = 20):
    """Microseconds per call of a Python loop of ``calls`` calls synchronised at the end
    (quartiles of ``rounds`` loops: q1, median, q3)."""
    from ..runtime.gpu import cupy
    cp = cupy()

    def timer(fn) -> tuple[float, float, float]:
        for _ in range(warmup):
            fn()
        cp.cuda.Device().synchronize()
        per = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            cp.cuda.Device().synchronize()
            per.append((time.perf_counter() - t0) / calls * 1e6)
        q = quartiles(per)
        return q.q1, q.median, q.q3
    return timer


def _contenders(prog, stem: str, dev: dict, outs: dict, cb, torch, torch_fns: dict):
    """Contender -> prepare() giving (check call, timed call)."""
    import cupy as cp
    names = [v.name for v in prog.program.outputs]
    prep = {
        PLAIN: lambda: (lambda: prog.calls.outputs(sync=True, **dev), lambda: prog(**dev)),
        REPEATED: lambda: (lambda: prog.calls.outputs(out=outs, sync=True, **dev), lambda: prog(out=outs, **dev)),
    }

    def bound():
        b = prog.bind(**dev)

        def check():
            b(sync=True)
            return b.outputs
        return check, b
    prep[BOUND] = bound
    if cb is not None and stem in peers.CUBLAS_SEQUENCES:
        def cublas():
            o = {k: cp.full_like(v, float("nan")) for k, v in outs.items()}
            run = peers.CUBLAS_SEQUENCES[stem](cb, cp.copyto, dev, o)

            def check():
                run()
                cp.cuda.Device().synchronize()
                return tuple(o[k] for k in names)
            return check, run
        prep[CUBLAS] = cublas
    if torch is not None and stem in torch_fns:
        tdev = {k: (torch.from_dlpack(v) if hasattr(v, "ndim") else v) for k, v in dev.items()}
        fn = torch_fns[stem]
        for name, mode in ((EAGER, None), (COMPILE, "default"), (REDUCE, "reduce-overhead")):
            def prepare(mode=mode):
                f = fn if mode is None else torch.compile(fn, mode=mode)
                if mode is not None:
                    torch._dynamo.reset()

                def check():
                    r = f(**tdev)
                    torch.cuda.synchronize()
                    return r
                return check, (lambda: f(**tdev))
            prep[name] = prepare
    return prep


def run_per_call(paths, dtypes, size_classes=SIZE_CLASSES, calls: int = 200, rounds: int = 5, seed: int = 0,
                 torch_compile: bool = True, log=print) -> tuple[list[PerCallRow], float]:
    """Rows for every sequence x dtype x size class, and the copy bandwidth (GB/s) of the run."""
    from ..compiler.api import compile as kcompile
    from ..runtime.gpu import cupy
    from ..runtime.timing import median_us
    cp = cupy()
    bandwidth = copy_bandwidth(2**30, device_timer(20, 3))
    log(f"copy bandwidth {bandwidth:.0f} GB/s")
    cb, _ = peers.load_cublas()
    torch, _ = peers.load_torch()
    torch_fns = peers.torch_sequences(torch) if torch is not None else {}
    timer = wall_timer(calls, rounds)
    rows = []
    for n, N in size_classes:
        for dtype in dtypes:
            for path in paths:
                stem = Path(path).stem
                shape = kcompile(path, dtype=dtype, tuned=False).program
                dims0 = sequence_dims(shape, n, N)
                prog = kcompile(path, dtype=dtype, sizes={d.name: dims0[d.id] for d in shape.dims})
                p = prog.program
                dims = sequence_dims(p, n, N)
                dev, expected = sequence_inputs(cp, p, dims, dtype, seed, 1)
                dev = dev[0]
                outs = {v.name: cp.full(tuple(dims[d] for d in v.dims), float("nan"), dtype=dtype)
                        for v in p.outputs}
                gpu = median_us(prog.bind(**dev), reps=100, warmup=10)
                row = PerCallRow(stem, dtype, n, N, gpu, len(prog.kernels))
                prep = _contenders(prog, stem, dev, outs, cb, torch, torch_fns)
                for name in COLUMNS:
                    if name not in prep or (not torch_compile and name in (COMPILE, REDUCE)):
                        continue
                    try:
                        row.records[name] = check_then_time(stem, dtype, "kfuse" if name.startswith("kfuse")
                                                            else name, prep[name], expected, timer)
                    except KfuseError as e:
                        row.records[name] = Record(stem, dtype, name, ERROR, note=str(e))
                rows.append(row)
                log(f"[{dtype} n={n} N={N}] {display_name(stem):8s} GPU {gpu:7.1f} us; "
                    + "; ".join(f"{k} {_cell(row, k)}" for k in COLUMNS if k in row.records))
                if torch is not None:
                    torch._dynamo.reset()
                    torch.cuda.empty_cache()
                cp.get_default_memory_pool().free_all_blocks()
    return rows, bandwidth


def _cell(row: PerCallRow, name: str) -> str:
    r = row.records.get(name)
    if r is None:
        return "-"
    return f"{r.time_us:.1f}" if r.status == OK else r.status


def markdown(rows: list[PerCallRow], bandwidth: float, header: str = "") -> str:
    out = ["# Per-call cost from a Python loop", "", header, "",
           f"Copy bandwidth in the same run: {bandwidth:.0f} GB/s. Microseconds per call (median of "
           "loops of 200 calls, one synchronisation per loop); every contender checked against the "
           "float64 reference first. GPU: kfuse's GPU time per call (CUDA events, warm L2).", ""]
    for (n, N, dtype) in dict.fromkeys((r.n, r.N, r.dtype) for r in rows):
        out += [f"## {dtype}, n = {n}, N = {N}", "",
                "| sequence | kernels | GPU | " + " | ".join(COLUMNS) + " | plain / eager |",
                "| --- | ---: | ---: | " + " | ".join("---:" for _ in COLUMNS) + " | ---: |"]
        for r in rows:
            if (r.n, r.N, r.dtype) != (n, N, dtype):
                continue
            plain, eager = r.us(PLAIN), r.us(EAGER)
            ratio = f"{plain / eager:.2f}" if plain and eager else "-"
            out.append(f"| {display_name(r.sequence)} | {r.kernels} | {r.gpu_us:.1f} | "
                       + " | ".join(_cell(r, k) for k in COLUMNS) + f" | {ratio} |")
        out.append("")
    return "\n".join(out)


def write_outputs(rows: list[PerCallRow], bandwidth: float, folder: Path, header: str = "") -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    md = folder / "per-call.md"
    md.write_text(markdown(rows, bandwidth, header))
    path = folder / "per-call.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["sequence", "dtype", "n", "N", "kernels", "gpu_us", *COLUMNS])
        for r in rows:
            w.writerow([r.sequence, r.dtype, r.n, r.N, r.kernels, f"{r.gpu_us:.2f}",
                        *[(f"{r.us(k):.2f}" if r.us(k) is not None else "") for k in COLUMNS]])
    written = [md, path]
    chart = _chart(rows, folder)
    return written + ([chart] if chart else [])


def read_csv(path: Path) -> list[PerCallRow]:
    """Rows of a ``per-call.csv`` written by ``write_outputs`` (to draw its chart again without a
    GPU); raises KfuseError on a file of another shape."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    need = {"sequence", "dtype", "n", "N", "kernels", "gpu_us", *COLUMNS}
    if not rows or not need <= set(rows[0]):
        raise KfuseError(f"{path}: not a per-call CSV (columns {', '.join(sorted(need))})")
    out = []
    try:
        for r in rows:
            row = PerCallRow(r["sequence"], r["dtype"], int(r["n"]), int(r["N"]), float(r["gpu_us"]), int(r["kernels"]))
            for k in COLUMNS:
                if r[k]:
                    row.records[k] = Record(r["sequence"], r["dtype"], k, OK, float(r[k]))
            out.append(row)
    except ValueError as e:
        raise KfuseError(f"{path}: {e}") from None
    return out


# one colour per contender, the same as in the bench charts (records.COLOURS); kfuse's other call
# forms in lighter blues, the CUDA-graph form of torch.compile in purple
PER_CALL_COLOURS = {PLAIN: COLOURS[KFUSE], REPEATED: "C9", BOUND: "#9ecae1", CUBLAS: COLOURS[CUBLAS],
                    EAGER: COLOURS[EAGER], COMPILE: COLOURS[COMPILE], REDUCE: "C4"}


def _chart(rows: list[PerCallRow], folder: Path) -> Path | None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    small = [r for r in rows if r.n == SIZE_CLASSES[0][0] and r.dtype == "float32"] or rows
    shown = (PLAIN, REPEATED, CUBLAS, EAGER, COMPILE, REDUCE)
    fig, ax = plt.subplots(figsize=(12, 4.5))
    width = 0.8 / len(shown)
    for k, name in enumerate(shown):
        ys = [r.us(name) or 0 for r in small]
        ax.bar([i + k * width for i in range(len(small))], ys, width, label=name, color=PER_CALL_COLOURS[name])
    ax.plot([i + 0.4 - width / 2 for i in range(len(small))], [r.gpu_us or 0.0 for r in small], "k_", markersize=20,
            label="kfuse GPU time")
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(small))], [display_name(r.sequence) for r in small])
    ax.set_ylabel("us per call (Python loop)")
    ax.set_yscale("log")
    ax.set_title(f"Per-call cost, {small[0].dtype}, n = {small[0].n}, N = {small[0].N}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.tight_layout()
    path = folder / "per-call.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
