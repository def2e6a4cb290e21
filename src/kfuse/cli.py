"""Command line: kfuse compile | plan | run | bench | tune | calibrate | report."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .errors import KfuseError


def _parse_sizes(program, specs: list[str]) -> dict[int, int]:
    """--size NAME=V (a dimension of the script) or --size V (every dimension not named)."""
    default = None
    named: dict[str, int] = {}
    for spec in specs:
        name, _, value = spec.rpartition("=")
        try:
            size = int(value)
        except ValueError:
            raise KfuseError(f"--size {spec}: expected NAME=INT or INT") from None
        if size < 1:
            raise KfuseError(f"--size {spec}: sizes are at least 1")
        if name:
            named[name] = size
        else:
            default = size
    dims: dict[int, int] = {}
    known = {d.name for d in program.dims}
    for name in named:
        if name not in known:
            raise KfuseError(f"--size {name}=...: the script's sizes are {', '.join(sorted(known))}")
    for d in program.dims:
        size = named.get(d.name, d.literal if d.literal is not None else default)
        if size is None:
            raise KfuseError(f"no size for {d.name}: give --size {d.name}=N (or --size N for all)")
        dims[d.id] = size
    return dims


def cmd_compile(args) -> int:
    from .api import compile as kcompile
    prog = kcompile(args.script, dtype=args.dtype, library=args.library, fuse=not args.unfused)
    if args.output:
        Path(args.output).write_text(prog.cuda_source)
        print(f"wrote {args.output}: {len(prog.kernels)} kernel(s), {len(prog.cuda_source.splitlines())} lines",
              file=sys.stderr)
    else:
        sys.stdout.write(prog.cuda_source)
    return 0


def cmd_plan(args) -> int:
    import itertools
    import time

    from .api import compile as kcompile
    t0 = time.perf_counter()
    prog = kcompile(args.script, dtype=args.dtype, library=args.library, fuse=not args.unfused)
    elapsed = time.perf_counter() - t0
    print(prog.describe())
    search = prog.search
    if search is not None:
        print(search.explain() if args.explain else search.explain().splitlines()[0])
        print(f"planned in {elapsed:.3f} s (without NVRTC); ranked by the {search.model.name}")
        if args.all:
            print(f"plans in predicted order (first {args.all}):")
            for n, plan in enumerate(itertools.islice(search.plans(), args.all)):
                kernels = " | ".join(", ".join(kc.call.name for kc in k.calls) + f" <{k.loop} U{k.unroll}"
                                     + (f" S{k.span}" if k.span > 1 else "")
                                     + "".join(f" {kc.variant.name}{dict(kc.macros).get('BY', '')}"
                                               for kc in k.calls) + ">" for k in plan.kernels)
                print(f"  {n + 1:4d}. {plan.predicted * 1e6:9.1f} us  {kernels}")
    if args.timings:
        prog.cuda_source            # the emit pass
        print(prog.timings.describe())
    if args.graph:
        print(prog.graph.dot())
    return 0


def cmd_run(args) -> int:
    from .api import compile as kcompile
    from .reference import device_case, evaluate, relative_error
    from .runtime.gpu import cupy
    cp = cupy()
    prog = kcompile(args.script, dtype=args.dtype, library=args.library)
    p = prog.program
    dims = _parse_sizes(p, args.size)
    print(f"{p.name}: sizes " + ", ".join(f"{d.name}={dims[d.id]}" for d in p.dims) + f", {args.dtype}",
          file=sys.stderr)
    dev, host, poisoned = device_case(p, dims, args.dtype, args.seed)
    got = prog(out=poisoned, sync=True, **dev)
    got = got if isinstance(got, tuple) else (got,)
    ref, mag = evaluate(p, host), evaluate(p, host, magnitude=True)
    tol = 1e-5 if args.dtype == "float32" else 1e-12
    ok = True
    for v, g in zip(p.outputs, got):
        err = relative_error(cp.asnumpy(g), ref[v.id], mag[v.id])
        ok &= err < tol
        print(f"  {v.name:10s} error {err:.2e} (relative to the magnitude of its terms) "
              f"{'ok' if err < tol else 'WRONG'}")
    from .runtime.timing import median_us
    t = median_us(prog.bind(**dev), reps=args.reps, cold_l2=True)    # bound: launches only, kfuse's own outputs
    print(f"  time {t:.1f} us (median of {args.reps} runs, CUDA events), {len(prog.kernels)} kernel(s)")
    return 0 if ok else 1


def _bench_size(text: str) -> int:
    """An integer, or a power written 2^26 / 2**26."""
    t = text.replace("**", "^")
    try:
        if "^" in t:
            base, _, exp = t.partition("^")
            return int(base) ** int(exp)
        return int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or a power like 2^26, got {text!r}") from None


def cmd_bench(args) -> int:
    import shlex

    from .bench import BenchOptions, resolve_sequences, run_bench, write_outputs
    from .bench.records import KFUSE, OK
    dtypes = []
    for d in args.dtype or ["float32"]:
        dtypes += ["float32", "float64"] if d == "both" else [d]
    if args.per_call:
        return _bench_per_call(args, tuple(dict.fromkeys(dtypes)))
    args.n = 8192 if args.n is None else args.n
    args.N = 2**26 if args.N is None else args.N
    opts = BenchOptions(n=args.n, N=args.N, dtypes=tuple(dict.fromkeys(dtypes)),
                        sequences=tuple(resolve_sequences(args.seq)) if args.seq else (),
                        reps=args.reps, warmup=args.warmup, torch_compile=not args.no_torch_compile,
                        seed=args.seed, command=shlex.join(["kfuse", *args.argv]))
    out = Path(args.out)
    run = run_bench(opts, checkpoint=lambda r: write_outputs(r, out, charts=False))
    written, notes = write_outputs(run, out)
    for line in [f"wrote {p}" for p in written] + notes:
        print(line, file=sys.stderr)
    failed = [r for r in run.records if r.contender == KFUSE and r.status != OK]
    return 1 if failed else 0     # kfuse wrong or failing somewhere (peers' failures are only reported)


def _bench_per_call(args, dtypes) -> int:
    import shlex

    from .bench import resolve_sequences
    from .bench.harness import default_sequences, environment
    from .bench.percall import SIZE_CLASSES, run_per_call, write_outputs
    from .bench.records import OK
    classes = SIZE_CLASSES if args.n is None and args.N is None else (
        (args.n or SIZE_CLASSES[0][0], args.N or SIZE_CLASSES[0][1]),)
    paths = resolve_sequences(args.seq) if args.seq else default_sequences()
    rows, bw = run_per_call(paths, dtypes, classes, seed=args.seed, torch_compile=not args.no_torch_compile,
                            log=lambda m: print(m, file=sys.stderr, flush=True))
    env = environment(shlex.join(["kfuse", *args.argv]))
    header = f"{env.get('gpu', '')}; {shlex.join(['kfuse', *args.argv])}"
    for path in write_outputs(rows, bw, Path(args.out), header):
        print(f"wrote {path}", file=sys.stderr)
    wrong = [r for row in rows for k, r in row.records.items() if k.startswith("kfuse") and r.status != OK]
    return 1 if wrong else 0


def cmd_tune(args) -> int:
    from .api import compile as kcompile
    prog = kcompile(args.script, dtype=args.dtype, library=args.library, tuned=False)
    sizes = None
    if args.size:
        dims = _parse_sizes(prog.program, args.size)
        sizes = {d.name: dims[d.id] for d in prog.program.dims}
    best = prog.tune(top=args.top, sizes=sizes, reps=args.reps, store=args.store or True)
    print(best.describe())
    return 0


def cmd_calibrate(args) -> int:
    from .calibration.measure import calibrate
    from .cost.store import read_file, search_paths, user_path, write_entry
    from .library.loader import load_library
    from .runtime.gpu import have_gpu
    if not have_gpu():
        raise KfuseError("calibrate measures routines on a GPU and none is usable here (CuPy and a CUDA "
                         "device are needed); without one, kfuse ranks plans by a shipped calibration or "
                         "the transfer model")
    lib = load_library(*(args.library or []))
    out = Path(args.out) if args.out else user_path()
    reuse = [] if args.fresh else [c for p in search_paths() for c in read_file(p)]
    for dtype in dict.fromkeys(args.dtype or ["float32", "float64"]):
        cal = calibrate(lib, dtype, quick=args.quick, reuse=reuse)
        write_entry(out, cal)
        reuse.append(cal)
        print(f"wrote {out}: calibration of {cal.describe()}", file=sys.stderr)
    return 0


def cmd_report(args) -> int:
    from .bench import resolve_sequences
    from .bench.harness import default_sequences
    from .bench.prediction import markdown, random_scripts, run_report
    out = Path(args.out)
    if args.random:
        paths = random_scripts(out.parent / f"{out.stem}-scripts", args.random, args.seed)
    else:
        paths = resolve_sequences(args.seq) if args.seq else default_sequences()
    out.parent.mkdir(parents=True, exist_ok=True)

    def checkpoint(results, header):
        out.write_text(markdown(results, header))
    results, header = run_report(paths, dtype=args.dtype, n=args.n, N=args.N, top=args.top, reps=args.reps,
                                 checkpoint=checkpoint)
    checkpoint(results, header)
    print(f"wrote {out}", file=sys.stderr)
    return 0


def _common(p) -> None:
    p.add_argument("script", help="script file (.kf)")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--library", action="append", default=None,
                   help="extra library folder (repeatable); the shipped BLAS library is always loaded")


def _script_commands(sub) -> None:
    """compile, plan, run, tune: commands on one script."""
    common = _common
    p = sub.add_parser("compile", help="generate CUDA for a script (no GPU needed)")
    common(p)
    p.add_argument("-o", "--output", help="write the CUDA source here instead of stdout")
    p.add_argument("--unfused", action="store_true", help="one kernel per call (no fusion)")
    p.set_defaults(fn=cmd_compile)
    p = sub.add_parser("plan", help="print the plan: kernels, calls in each, launch configuration")
    common(p)
    p.add_argument("--graph", action="store_true", help="also print the dependency graph (Graphviz)")
    p.add_argument("--explain", action="store_true", help="list every fusion, and why each refused one was refused")
    p.add_argument("--all", type=int, nargs="?", const=20, default=0, metavar="K",
                   help="list the first K plans (default 20) in predicted order")
    p.add_argument("--unfused", action="store_true", help="one kernel per call (no fusion)")
    p.add_argument("--timings", action="store_true",
                   help="print the time of each compiler pass (library, parse, space, rank, search, layout, emit)")
    p.set_defaults(fn=cmd_plan)
    p = sub.add_parser("run", help="run on random inputs, check against NumPy, print the time (GPU)")
    common(p)
    p.add_argument("--size", action="append", default=[], metavar="NAME=N",
                   help="size of a script dimension (repeatable); a bare N sets every dimension not named")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--reps", type=int, default=50)
    p.set_defaults(fn=cmd_run)
    p = sub.add_parser("tune", help="measure the top-ranked plans on the GPU and remember the fastest")
    common(p)
    p.add_argument("--top", type=int, default=20, help="plans to measure (default 20)")
    p.add_argument("--size", action="append", default=[], metavar="NAME=N",
                   help="sizes to tune at (default: the model's, 8192 per matrix side, 2^24 per vector)")
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--store", help="tuning store file (default $KFUSE_CACHE_DIR or ~/.cache/kfuse/tuning.jsonl)")
    p.set_defaults(fn=cmd_tune)


def _measure_commands(sub) -> None:
    """bench, calibrate, report: measurement campaigns on the GPU."""
    p = sub.add_parser("bench", help="benchmark the examples against cuBLAS, PyTorch eager and torch.compile (GPU)",
                       description="Measure the copy bandwidth, then check (against a float64 NumPy reference) "
                                   "and time kfuse's plan, cuBLAS through CuPy, PyTorch eager and torch.compile "
                                   "on each sequence; write results.md, results.csv, env.json and PNG charts.")
    p.add_argument("--n", type=_bench_size, default=None, help="size of every dimension of a script with a matrix "
                   "(default 8192; --per-call: 1024 and 8192)")
    p.add_argument("--N", type=_bench_size, default=None, help="size of every dimension of a script without a "
                   "matrix (default 2^26; --per-call: 2^20 and 2^26)")
    p.add_argument("--per-call", action="store_true",
                   help="wall time per call from a Python loop (plain, repeated and bound calls, cuBLAS, torch "
                        "eager, torch.compile default and reduce-overhead) at n = 1024 / N = 2^20 and "
                        "n = 8192 / N = 2^26; writes per-call.md, per-call.csv, per-call.png")
    p.add_argument("--dtype", action="append", choices=["float32", "float64", "both"], default=None,
                   help="element type (repeatable, or 'both'; default float32)")
    p.add_argument("--seq", action="append", default=None, metavar="NAME",
                   help="sequence: an example's name (gemver) or a .kf path (repeatable; default all examples)")
    p.add_argument("--reps", type=int, default=100, help="timed repetitions, median reported (default 100)")
    p.add_argument("--warmup", type=int, default=10, help="untimed calls before timing (default 10)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--out", default="bench-out", help="output folder (default bench-out)")
    p.add_argument("--no-torch-compile", action="store_true", help="skip the (slow to compile) torch.compile peer")
    p.set_defaults(fn=cmd_bench)
    p = sub.add_parser("calibrate", help="measure every library routine in simulated fusion environments (GPU)",
                       description="Time every routine of every function, variant and macro value of the library "
                                   "(shipped BLAS plus --library folders) in simulated fusion environments, plus "
                                   "launch overhead, clears and barriers; write the calibration (keyed by GPU name, "
                                   "library digest and dtype) that ranks plans from then on.")
    p.add_argument("--library", action="append", default=None, metavar="DIR",
                   help="also calibrate this library folder (repeatable); routines measured before are reused")
    p.add_argument("--out", help="calibration file (default $KFUSE_CACHE_DIR or ~/.cache/kfuse/calibration.json)")
    p.add_argument("--dtype", action="append", choices=["float32", "float64"], default=None,
                   help="element type (repeatable; default both)")
    p.add_argument("--quick", action="store_true", help="smaller sizes, fewer environments and repetitions")
    p.add_argument("--fresh", action="store_true", help="measure every routine again (reuse nothing)")
    p.set_defaults(fn=cmd_calibrate)
    p = sub.add_parser("report", help="prediction report: rank of the measured best, first choice vs best, "
                                      "times to plan and search (the paper's Tables 4 and 5; GPU)")
    p.add_argument("--seq", action="append", default=None, metavar="NAME",
                   help="sequence: an example's name or a .kf path (repeatable; default all examples)")
    p.add_argument("--top", type=int, default=20, metavar="K", help="plans measured per sequence (default 20)")
    p.add_argument("--n", type=_bench_size, default=8192, help="every dimension of a script with a matrix")
    p.add_argument("--N", type=_bench_size, default=2**26, help="every dimension of a script without a matrix")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--reps", type=int, default=20, help="timed repetitions per plan, median (default 20)")
    p.add_argument("--out", default="report.md", help="markdown file to write (default report.md)")
    p.add_argument("--random", type=int, default=0, metavar="K",
                   help="report on K random scripts of the generator instead (written beside the report)")
    p.add_argument("--seed", type=int, default=0, help="first seed of --random (default 0)")
    p.set_defaults(fn=cmd_report)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="kfuse", description="Automatic kernel fusion of BLAS-like scripts into CUDA")
    sub = ap.add_subparsers(dest="cmd", required=True)
    _script_commands(sub)
    _measure_commands(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return args.fn(args)
    except KfuseError as e:
        print(f"kfuse: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
