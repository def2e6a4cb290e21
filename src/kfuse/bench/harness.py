"""The benchmark run loop: copy bandwidth as the ceiling, then for each sequence and element
type every contender (kfuse's plan, cuBLAS through CuPy, PyTorch eager, torch.compile) is
checked against a float64 NumPy reference and, only if it passes, timed.

The pure parts (sizes, L2 rotation, tolerances, check-then-time) need neither a GPU nor CuPy
nor PyTorch; those are imported inside the functions that run on the device.
"""
from __future__ import annotations

import functools
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..progress import Progress
from ..errors import KfuseError
from ..reference import evaluate, random_inputs, relative_error
from . import peers
from .records import (CONTENDERS, CUBLAS, ERROR, KFUSE, MISSING, NOT_AVAILABLE, OK, PAPER_ORDER, TORCH_COMPILE,
                      TORCH_EAGER, WRONG, BenchRun, Record, SequenceInfo, display_name)
from .report import fmt_bytes
from ..cost import counts

DTYPES = ("float32", "float64")
L2_DEFAULT_BYTES = 50 * 2**20       # H100's L2; the device's own size is used when known
ROTATION_FACTOR = 4                 # rotate input sets while the inputs are under 4 x L2 ...
MAX_INPUT_SETS = 256                # ... but never more sets than this (tiny sizes: launch-bound anyway)
# Worst relative error (to the magnitude of the terms) a contender may have and still be timed.
# kfuse's own (its GPU tests use the same); peers a decade looser (other summation orders).
TOLERANCE = {(KFUSE, "float32"): 1e-5, (KFUSE, "float64"): 1e-12,
             ("peer", "float32"): 1e-4, ("peer", "float64"): 1e-11}

# callable -> median microseconds, or its quartiles (q1, median, q3)
Timer = Callable[[Callable[[], Any]], "float | tuple[float, float, float]"]
Prepare = Callable[[], tuple[Callable[[], Any], Callable[[], Any]]]   # () -> (check, timed)
Log = Callable[[str], None]


@dataclass(frozen=True)
class BenchOptions:
    n: int = 8192                       # every dimension of a script with a matrix
    N: int = 2**26                      # every dimension of a script without one
    dtypes: tuple[str, ...] = ("float32",)
    sequences: tuple[Path, ...] = ()    # empty: every example, in the paper's order
    reps: int = 100
    warmup: int = 10
    torch_compile: bool = True
    seed: int = 0
    copy_bytes: int = 2**30             # buffer copied to measure the bandwidth ceiling
    command: str = ""                   # the command line, recorded in env.json

    def __post_init__(self):
        if self.n < 1 or self.N < 1:
            raise KfuseError(f"sizes are at least 1 (got n={self.n}, N={self.N})")
        if self.reps < 1 or self.warmup < 0:
            raise KfuseError(f"need reps >= 1 and warmup >= 0 (got {self.reps}, {self.warmup})")
        bad = [d for d in self.dtypes if d not in DTYPES]
        if bad or not self.dtypes:
            raise KfuseError(f"dtypes must be among {', '.join(DTYPES)}, got {', '.join(self.dtypes) or 'none'}")


# --- sequences and sizes ------------------------------------------------------------------------

def examples_dir() -> Path:
    """The examples shipped with the package (kfuse/examples: in a checkout, a link to the
    repository's examples/)."""
    return Path(__file__).resolve().parents[1] / "examples"


def default_sequences(folder: Path | None = None) -> list[Path]:
    folder = folder or examples_dir()
    found = {p.stem: p for p in folder.glob("*.kf")}
    if not found:
        raise KfuseError(f"no examples (*.kf) in {folder}; name the scripts with --seq")
    known = [found[s] for s in PAPER_ORDER if s in found]
    return known + sorted((p for s, p in found.items() if s not in PAPER_ORDER), key=lambda p: p.stem)


def resolve_sequences(names: Sequence[str], folder: Path | None = None) -> list[Path]:
    """Script paths for ``--seq`` values: an example's name (``gemver``) or a path to a .kf file."""
    folder = folder or examples_dir()
    out = []
    for name in names:
        path = Path(name)
        if path.suffix == ".kf" and path.is_file():
            out.append(path)
        elif (folder / f"{name}.kf").is_file():
            out.append(folder / f"{name}.kf")
        else:
            known = ", ".join(p.stem for p in default_sequences(folder))
            raise KfuseError(f"--seq {name}: no example of that name in {folder} ({known}) and no such .kf file")
    return list(dict.fromkeys(out))


def sequence_dims(program, n: int, N: int) -> dict[int, int]:
    """Every dimension is ``n`` if the script has a matrix, else ``N`` (sizes fixed by the script stay)."""
    size = n if any(v.type == "matrix" for v in program.values) else N
    return {d.id: (d.literal if d.literal is not None else size) for d in program.dims}


def input_bytes(program, dims: dict[int, int], dtype: str) -> int:
    item = np.dtype(dtype).itemsize
    return sum(math.prod(dims[d] for d in v.dims) * item for v in program.inputs if v.type != "scalar")


def rotation_sets(nbytes: int, l2_bytes: int = L2_DEFAULT_BYTES, factor: int = ROTATION_FACTOR,
                  cap: int = MAX_INPUT_SETS) -> int:
    """Input sets to cycle through between repetitions so that no repetition finds its data in
    L2: one when the inputs already span ``factor`` x L2, else enough sets to span it."""
    target = factor * l2_bytes
    if nbytes >= target:
        return 1
    return min(cap, math.ceil(target / max(nbytes, 1)))


def tolerance(contender: str, dtype: str) -> float:
    return TOLERANCE[(KFUSE if contender == KFUSE else "peer", dtype)]


# --- check, then time ----------------------------------------------------------------------------

def to_numpy(x) -> np.ndarray:
    """A host copy of a CuPy array, a torch tensor or anything NumPy takes."""
    module = type(x).__module__.split(".")[0]
    if module == "torch":
        return x.detach().cpu().numpy()
    if module == "cupy":
        return x.get()
    return np.asarray(x)


def as_tuple(result) -> tuple:
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def cycle_calls(calls: Sequence[Callable[[], Any]]) -> Callable[[], Any]:
    """One callable that makes the next of ``calls`` each time (the calls themselves when one)."""
    if len(calls) == 1:
        return calls[0]
    state = [0]

    def call():
        fn = calls[state[0] % len(calls)]
        state[0] += 1
        return fn()
    return call


def output_errors(got: Sequence, expected: Sequence[tuple[str, np.ndarray, np.ndarray]]) -> dict[str, float]:
    """Output name -> error relative to the magnitude of its terms (inf for NaN: unwritten)."""
    if len(got) != len(expected):
        raise KfuseError(f"returned {len(got)} result(s); the script returns {len(expected)} "
                         f"({', '.join(name for name, _, _ in expected)})")
    return {name: relative_error(to_numpy(g), ref, mag) for g, (name, ref, mag) in zip(got, expected)}


def check_then_time(sequence: str, dtype: str, contender: str, prepare: Prepare,
                    expected: Sequence[tuple[str, np.ndarray, np.ndarray]], timer: Timer,
                    tol: float | None = None) -> Record:
    """Prepare the contender, run its check call, compare every output with the reference and
    time it only if all pass: a wrong result is a WRONG record with no time.

    ``prepare()`` returns ``(check, timed)``: ``check()`` runs once on the reference's inputs and
    returns the outputs in the script's order; ``timed`` is what ``timer`` repeats.  A failure
    anywhere becomes an ``error`` record carrying the exception's text, so one broken peer does
    not lose the rest of the run; the record is printed and reported, never hidden.
    """
    tol = tolerance(contender, dtype) if tol is None else tol
    base: dict[str, Any] = {"sequence": sequence, "dtype": dtype, "contender": contender, "tolerance": tol}
    try:
        check, timed = prepare()
        errors = output_errors(as_tuple(check()), expected)
    except Exception as e:   # noqa: BLE001 - recorded as an error record and shown (see docstring)
        return Record(**base, status=ERROR, note=_describe(e))
    worst = max(errors.values())
    if not worst <= tol:            # NaN-safe
        bad = ", ".join(f"{k} {v:.1e}" for k, v in errors.items() if not v <= tol)
        return Record(**base, status=WRONG, error=worst, note=f"error above {tol:.0e}: {bad}; not timed")
    try:
        q1, t, q3 = _spread(timer(timed))
    except Exception as e:   # noqa: BLE001 - as above
        return Record(**base, status=ERROR, error=worst, note="timing failed: " + _describe(e))
    return Record(**base, status=OK, time_us=t, q1_us=q1, q3_us=q3, error=worst)


def _spread(measured: float | tuple[float, float, float]) -> tuple[float | None, float, float | None]:
    """(q1, median, q3) of what a timer returned (quartiles None when it gave the median only)."""
    if isinstance(measured, tuple):
        q1, median, q3 = (float(v) for v in measured)
        return q1, median, q3
    return None, float(measured), None


def _describe(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:300]}" + ("..." if len(text) > 300 else "")


def progress_line(r: Record, info: SequenceInfo | None = None) -> str:
    head = f"[{r.dtype}] {display_name(r.sequence):8s} {r.contender:14s}"
    if r.status == OK:
        extra = f", {info.kernels} kernel(s)" if info is not None and r.contender == KFUSE else ""
        spread = f" [{r.q1_us:.1f}, {r.q3_us:.1f}]" if r.q1_us is not None else ""
        return f"{head} {r.time_us:10.1f} us{spread}  ok (error {r.error:.1e}){extra}"
    if r.status == WRONG:
        return f"{head} {'WRONG':>10s}     error {r.error:.1e}: {r.note}"
    return f"{head} {r.status:>10s}     {r.note}"


# --- on the device -------------------------------------------------------------------------------

def device_timer(reps: int, warmup: int) -> Timer:
    """Quartiles of CUDA-event timings, every call after a read of 4 x L2 (no contender finds the
    previous call's data in L2; a plan's kernels still find what the kernel before left)."""
    from ..runtime.timing import quartiles_us
    def timer(fn: Callable[[], Any]) -> tuple[float, float, float]:
        q = quartiles_us(fn, reps=reps, warmup=warmup, cold_l2=True)
        return q.q1, q.median, q.q3
    return timer


def copy_bandwidth(nbytes: int, timer: Timer) -> float:
    """Device-to-device copy bandwidth in GB/s, counting bytes read plus bytes written."""
    from ..runtime.gpu import cupy
    cp = cupy()
    src = cp.ones(nbytes // 4, dtype=cp.float32)
    dst = cp.empty_like(src)
    t = _spread(timer(functools.partial(cp.copyto, dst, src)))[1]
    moved = 2 * src.nbytes
    del src, dst
    cp.get_default_memory_pool().free_all_blocks()
    return moved / t / 1e3


def l2_bytes() -> int:
    from ..runtime.gpu import cupy
    try:
        return int(cupy().cuda.Device().attributes["L2CacheSize"]) or L2_DEFAULT_BYTES
    except KeyError:
        return L2_DEFAULT_BYTES


def environment(command: str) -> dict:
    """GPU, driver, CUDA, library versions, kfuse version and library digest, date, command line."""
    import datetime
    import platform
    import subprocess

    from .. import __version__
    from ..library.loader import load_library
    from ..runtime.gpu import cupy
    cp = cupy()
    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    env = {
        "gpu": name,
        "gpu_index": dev.id,
        "compute_capability": dev.compute_capability,
        "sm_count": dev.attributes["MultiProcessorCount"],
        "gpu_memory_bytes": int(props["totalGlobalMem"]),
        "l2_bytes": l2_bytes(),
        "timing": "median and quartiles of CUDA-event timings; every call after a read of 4 x L2 (no call finds the call before it in L2)",
        "driver_version": None,
        "cuda_driver_api_version": cp.cuda.runtime.driverGetVersion(),
        "cuda_runtime_version": cp.cuda.runtime.runtimeGetVersion(),
        "cupy": cp.__version__,
        "torch": None,
        "torch_cuda": None,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "kfuse": __version__,
        "library_digest": load_library().digest,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "git_commit": git_commit(),
    }
    try:
        env["nvrtc_version"] = ".".join(map(str, cp.cuda.nvrtc.getVersion()))
    except (AttributeError, RuntimeError):      # NVRTCError is a RuntimeError
        env["nvrtc_version"] = None
    try:
        smi = subprocess.run(["nvidia-smi", f"--id={dev.id}", "--query-gpu=driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
        env["driver_version"] = smi.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        pass
    torch, _ = peers.load_torch()
    if torch is not None:
        env["torch"], env["torch_cuda"] = torch.__version__, torch.version.cuda
    try:
        import matplotlib
        env["matplotlib"] = matplotlib.__version__
    except ImportError:
        env["matplotlib"] = None
    return env


def git_commit() -> str | None:
    """The commit of the kfuse checkout that runs ("+dirty" with uncommitted changes); None
    outside a git checkout."""
    import subprocess
    root = Path(__file__).resolve().parents[3]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty else "")


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run_bench(opts: BenchOptions, log: Log = _stderr, checkpoint: Callable[[BenchRun], object] | None = None,
              timer: Timer | None = None) -> BenchRun:
    """Measure the copy bandwidth, then every sequence x dtype x contender; ``checkpoint`` is
    called with the run so far after each sequence (to write partial outputs).  ``timer``
    defaults to CUDA events (median of ``opts.reps`` after ``opts.warmup`` calls)."""
    from ..runtime.gpu import cupy
    cp = cupy()
    if cp.cuda.runtime.getDeviceCount() < 1:
        raise KfuseError("kfuse bench needs a CUDA GPU; none is visible")
    timer = timer or device_timer(opts.reps, opts.warmup)
    env = environment(opts.command)
    log(f"{env['gpu']}, driver {env['driver_version']}, CUDA runtime {env['cuda_runtime_version']}, "
        f"CuPy {env['cupy']}, PyTorch {env['torch']}")
    bw = copy_bandwidth(opts.copy_bytes, timer)
    run = BenchRun(n=opts.n, N=opts.N, reps=opts.reps, warmup=opts.warmup, copy_gbps=bw,
                   copy_bytes=opts.copy_bytes, l2_bytes=env["l2_bytes"], env=env)
    log(f"copy bandwidth {bw:.0f} GB/s (bytes read + written, {opts.copy_bytes / 2**20:.0f} MiB copied, "
        f"median of {opts.reps})")

    cb, why = peers.load_cublas()
    if why:
        run.peer_notes[CUBLAS] = why
    torch, why = peers.load_torch()
    if why:
        run.peer_notes[TORCH_EAGER] = run.peer_notes[TORCH_COMPILE] = why
    elif not opts.torch_compile:
        run.peer_notes[TORCH_COMPILE] = "skipped (--no-torch-compile)"
    for name, why in run.peer_notes.items():
        log(f"{name}: not available: {why}")
    torch_fns = peers.torch_sequences(torch) if torch is not None else {}

    paths = list(opts.sequences) or default_sequences()
    start = time.perf_counter()
    bar = Progress("bench: sequences", len(opts.dtypes) * len(paths), log)
    for dtype in opts.dtypes:
        for path in paths:
            _run_sequence(run, Path(path), dtype, opts, timer, log, cb, torch, torch_fns)
            bar.step()
            cp.get_default_memory_pool().free_all_blocks()
            if torch is not None:
                torch.cuda.empty_cache()
            if checkpoint is not None:
                checkpoint(run)
    bar.close()
    log(f"done in {time.perf_counter() - start:.0f} s")
    return run


def sequence_inputs(cp, p, dims, dtype: str, seed: int, sets: int):
    """Input sets on the device and the float64 reference of set 0 [(name, value, magnitude)].
    Scalars are the same in every set (so that torch.compile sees one set of constants) and
    rounded to the dtype for everyone."""
    dt = np.dtype(dtype)
    first = random_inputs(p, dims, seed)
    scalars = {k: float(dt.type(v)) for k, v in first.items() if not isinstance(v, np.ndarray)}
    rounded = {k: (v.astype(dt).astype(np.float64) if isinstance(v, np.ndarray) else scalars[k])
               for k, v in first.items()}
    ref, mag = evaluate(p, rounded), evaluate(p, rounded, magnitude=True)
    expected = [(v.name, ref[v.id], mag[v.id]) for v in p.outputs]
    del ref, mag, rounded

    def upload(host):
        return {k: (cp.asarray(v.astype(dt)) if isinstance(v, np.ndarray) else scalars[k]) for k, v in host.items()}

    dev = [upload(first)]
    del first
    dev += [upload(random_inputs(p, dims, seed + 1 + s)) for s in range(sets - 1)]
    return dev, expected


class _Contenders:
    """The prepare step (check call, timed call) of each contender on one sequence's input sets."""

    def __init__(self, cp, prog, dims, dtype: str, dev: list[dict]):
        self.cp, self.prog, self.dev = cp, prog, dev
        self.dt = np.dtype(dtype)
        self.shapes = {v.name: tuple(dims[d] for d in v.dims) for v in prog.program.outputs}
        self.names = [v.name for v in prog.program.outputs]

    def outputs(self):
        return [{k: self.cp.full(s, np.nan, dtype=self.dt) for k, s in self.shapes.items()} for _ in self.dev]

    def kfuse(self):
        outs = self.outputs()
        check = functools.partial(self.prog.calls.outputs, out=outs[0], sync=True, **self.dev[0])
        # timed calls are bound once: arguments checked and launches prepared outside the timing;
        # their outputs are kfuse's own, as a caller gets them without out= (reduced outputs in
        # one buffer, cleared by one memset)
        return check, cycle_calls([self.prog.bind(**d) for d in self.dev])

    def cublas(self, build, cb) -> Prepare:
        def prepare():
            outs = self.outputs()
            runs = [build(cb, self.cp.copyto, d, o) for d, o in zip(self.dev, outs)]

            def check():
                runs[0]()
                self.cp.cuda.get_current_stream().synchronize()
                return tuple(outs[0][k] for k in self.names)
            return check, cycle_calls(runs)
        return prepare

    def torch(self, torch, fn, compiled: bool) -> Prepare:
        def prepare():
            tdev = [{k: (torch.from_dlpack(v) if not isinstance(v, float) else v) for k, v in d.items()}
                    for d in self.dev]
            f = fn
            if compiled:
                torch._dynamo.reset()
                f = torch.compile(fn)

            def check():
                result = f(**tdev[0])
                torch.cuda.synchronize()
                return result
            return check, cycle_calls([functools.partial(f, **t) for t in tdev])
        return prepare


def _run_sequence(run: BenchRun, path: Path, dtype: str, opts: BenchOptions, timer: Timer, log: Log,
                  cb, torch, torch_fns: dict) -> None:
    from ..compiler.api import compile as kcompile
    from ..runtime.gpu import cupy
    cp = cupy()
    stem = path.stem
    try:
        # plan for the sizes measured here (the model's ranking and the tuning store's size class)
        shape = kcompile(path, dtype=dtype, tuned=False).program
        dims0 = sequence_dims(shape, opts.n, opts.N)
        prog = kcompile(path, dtype=dtype, sizes={d.name: dims0[d.id] for d in shape.dims})
    except KfuseError as e:
        r = Record(stem, dtype, KFUSE, ERROR, note=_describe(e))
        run.records.append(r)
        log(progress_line(r) + " (sequence skipped)")
        return
    p = prog.program
    dims = sequence_dims(p, opts.n, opts.N)
    nbytes = input_bytes(p, dims, dtype)
    sets = rotation_sets(nbytes, run.l2_bytes)
    info = SequenceInfo(sequence=stem, dtype=dtype, sizes={d.name: dims[d.id] for d in p.dims},
                        flops=counts.flops(prog.program, dims), plan_bytes=counts.traffic(prog.program, prog.kernels, prog.dtype, dims),
                        onepass_bytes=counts.compulsory_traffic(prog.program, prog.dtype, dims), input_bytes=nbytes,
                        kernels=len(prog.kernels), input_sets=sets, plan=prog.plan.summary(),
                        tuned=prog.from_store)
    run.sequences.append(info)
    log(f"[{dtype}] {display_name(stem)}: " + ", ".join(f"{k}={v}" for k, v in info.sizes.items())
        + f"; inputs {fmt_bytes(nbytes)}, {sets} input set(s); traffic: plan {fmt_bytes(info.plan_bytes)}, "
        f"one-pass {fmt_bytes(info.onepass_bytes)}; {info.kernels} kernel(s)")
    dev, expected = sequence_inputs(cp, p, dims, dtype, opts.seed, sets)
    contenders = _Contenders(cp, prog, dims, dtype, dev)
    prepares: dict[str, Prepare | Record] = {KFUSE: contenders.kfuse}
    for name in (CUBLAS, TORCH_EAGER, TORCH_COMPILE):
        if name in run.peer_notes:
            prepares[name] = Record(stem, dtype, name, NOT_AVAILABLE, note=run.peer_notes[name])
            continue
        entry = (peers.CUBLAS_SEQUENCES if name == CUBLAS else torch_fns).get(stem)
        if entry is None:
            prepares[name] = Record(stem, dtype, name, MISSING, note=f"no {name} peer written for {stem}")
        elif name == CUBLAS:
            prepares[name] = contenders.cublas(entry, cb)
        else:
            prepares[name] = contenders.torch(torch, entry, compiled=name == TORCH_COMPILE)

    for name in CONTENDERS:
        item = prepares[name]
        r = item if isinstance(item, Record) else check_then_time(stem, dtype, name, item, expected, timer)
        run.records.append(r)
        log(progress_line(r, info))
