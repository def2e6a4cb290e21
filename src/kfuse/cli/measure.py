"""Commands of the command line that measure on a GPU: bench, calibrate, report, and their options
(kfuse.cli adds them to its parser and runs them)."""
from __future__ import annotations

import json
import logging
from pathlib import Path

from .util import (EXIT_ERROR, GpuRequiredError, bench_size, nonnegative_float, nonnegative_int, positive_int,
                   require_gpu, error_json, json_option, print_json, write_output)
from ..errors import KfuseError

log = logging.getLogger("kfuse")


def cmd_bench(args) -> int:
    import shlex

    from ..bench import BenchOptions, resolve_sequences, run_bench, write_outputs
    from ..bench.records import KFUSE, OK
    dtypes = []
    for d in args.dtype or ["float32"]:
        dtypes += ["float32", "float64"] if d == "both" else [d]
    if args.per_call:
        return _bench_per_call(args, tuple(dict.fromkeys(dtypes)))
    args.n = 8192 if args.n is None else args.n
    args.N = 2**26 if args.N is None else args.N
    sequences = tuple(resolve_sequences(args.seq)) if args.seq else ()
    require_gpu("bench")
    opts = BenchOptions(n=args.n, N=args.N, dtypes=tuple(dict.fromkeys(dtypes)),
                        sequences=sequences,
                        reps=args.reps, warmup=args.warmup, torch_compile=not args.no_torch_compile,
                        seed=args.seed, command=shlex.join(["kfuse", *args.argv]))
    out = Path(args.out)
    run = run_bench(opts, checkpoint=lambda r: write_outputs(r, out, charts=False))
    written, notes = write_outputs(run, out)
    for line in [f"wrote {p}" for p in written] + notes:
        log.info(line)
    failed = [r for r in run.records if r.contender == KFUSE and r.status != OK]
    if args.json:
        _bench_json(written, notes, [(r.sequence, r.dtype, r.status, r.note) for r in failed])
    return EXIT_ERROR if failed else 0     # kfuse wrong or failing somewhere (peers' failures are only reported)


def _bench_json(written, notes, failed) -> None:
    """bench --json: the files written, the notes, and kfuse's failures (sequence, dtype, status,
    note) with an error when there are any."""
    doc: dict = {"written": [str(p) for p in written], "notes": list(notes),
                 "failed": [{"sequence": s, "dtype": d, "status": st, "note": n} for s, d, st, n in failed]}
    if failed:
        doc["error"] = error_json("wrong_result", f"kfuse failed or was wrong on {len(failed)} case(s): " +
                                  ", ".join(f"{s} ({d}): {st}" for s, d, st, _ in failed), EXIT_ERROR)
    print_json(doc)


def _bench_per_call(args, dtypes) -> int:
    import shlex

    from ..bench import resolve_sequences
    from ..bench.harness import default_sequences, environment
    from ..bench.percall import SIZE_CLASSES, run_per_call, write_outputs
    from ..bench.records import OK
    classes = SIZE_CLASSES if args.n is None and args.N is None else (
        (args.n or SIZE_CLASSES[0][0], args.N or SIZE_CLASSES[0][1]),)
    paths = resolve_sequences(args.seq) if args.seq else default_sequences()
    require_gpu("bench")
    rows, bw = run_per_call(paths, dtypes, classes, seed=args.seed, torch_compile=not args.no_torch_compile,
                            log=log.info)
    env = environment(shlex.join(["kfuse", *args.argv]))
    header = f"{env.get('gpu', '')}; {shlex.join(['kfuse', *args.argv])}"
    written = write_outputs(rows, bw, Path(args.out), header)
    for path in written:
        log.info(f"wrote {path}")
    wrong = [(row, k, r) for row in rows for k, r in row.records.items() if k.startswith("kfuse") and r.status != OK]
    if args.json:
        _bench_json(written, [], [(r.sequence, r.dtype, f"{k}: {r.status}", r.note) for _, k, r in wrong])
    return EXIT_ERROR if wrong else 0


def cmd_calibrate(args) -> int:
    from ..calibration.measure import calibrate
    from ..cost.store import read_file, search_paths, user_path, write_entry
    from ..library.loader import load_library
    from ..env import writable_folder
    from ..runtime.gpu import have_gpu
    if not have_gpu():
        raise GpuRequiredError("calibrate measures routines on a GPU and none is usable here (CuPy and a CUDA "
                         "device are needed); without one, kfuse ranks plans by a shipped calibration or "
                         "the transfer model")
    lib = load_library(*(args.library or []))
    out = Path(args.out) if args.out else user_path()
    writable_folder(out.parent, "the calibration")      # before the measurements, not after
    reuse = [] if args.fresh else [c for p in search_paths() for c in read_file(p)]
    written = []
    for dtype in dict.fromkeys(args.dtype or ["float32", "float64"]):
        cal = calibrate(lib, dtype, quick=args.quick, reuse=reuse)
        write_entry(out, cal)
        reuse.append(cal)
        written.append({"gpu": cal.gpu, "library": cal.library, "dtype": cal.dtype})
        log.info(f"wrote {out}: calibration of {cal.describe()}")
    if args.json:
        print_json({"out": str(out), "calibrations": written})
    return 0


def cmd_report(args) -> int:
    from ..bench import resolve_sequences
    from ..bench.harness import default_sequences
    from ..bench.prediction import markdown, random_scripts, run_report
    if args.reprice:
        return _reprice(args)
    out = Path(args.out or "report.md")
    if out.is_dir():
        raise KfuseError(f"--out {out}: is a folder; give a file name")
    require_gpu("report")          # before the output folder is made
    if args.random:
        paths = random_scripts(out.parent / f"{out.stem}-scripts", args.random, args.seed)
    else:
        paths = resolve_sequences(args.seq) if args.seq else default_sequences()
    out.parent.mkdir(parents=True, exist_ok=True)

    def checkpoint(results, header):
        out.write_text(markdown(results, header))
        out.with_suffix(".json").write_text(json.dumps({"header": header, "sequences": [r.to_json() for r in results]},
                                                       indent=1))
    results, header = run_report(paths, dtype=args.dtype, n=args.n, N=args.N, top=args.top, reps=args.reps,
                                 checkpoint=checkpoint, rounds=args.retime, alt_launch_ns=args.alt_launch_ns,
                                 alt_clear_ns=args.alt_clear_ns, sample=args.sample)
    checkpoint(results, header)
    log.info(f"wrote {out}")
    if args.json:
        print_json({"out": str(out), "json": str(out.with_suffix(".json")),
                    "sequences": [r.to_json() for r in results]})
    return 0


def _reprice(args) -> int:
    """``kfuse report --reprice FILE.json``: a report's measured plans priced again (no GPU)."""
    from ..bench import reprice
    from ..bench.prediction import alternative_model
    if args.random or args.seq:
        raise KfuseError("--reprice prices the plans of a report already made: --random and --seq do not apply")
    src = Path(args.reprice)
    out = Path(args.out) if args.out else src.with_name(src.stem + "-repriced.md")
    data = reprice.load_report(src)
    alt, label = None, None
    if args.alt_launch_ns is not None or args.alt_clear_ns is not None:
        alt = lambda m: alternative_model(m, args.alt_launch_ns, args.alt_clear_ns)      # noqa: E731
        label = f"the same model with launch {args.alt_launch_ns} ns and clear {args.alt_clear_ns} ns (None: as it is)"
    rows, name = reprice.reprice(data, alt, log=log.info)
    text = reprice.markdown(rows, data, name, label)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)      # as kfuse report makes its --out's folder
    except OSError as e:
        raise KfuseError(f"--out {out}: cannot make its folder ({e.strerror or e})") from None
    write_output(str(out), text, keep=src, option="--out", kept="the report repriced")
    log.info(f"wrote {out}")
    if args.json:
        print_json({"out": str(out), "sequences": [{"name": r.name, "stale": r.stale, "plans": [
            {"rank": k, "measured_us": m, "predicted_us": p, **({"alternative_us": a} if a is not None else {})}
            for k, m, p, a in r.plans]} for r in rows]})
    else:
        print("\n".join(line for line in text.splitlines() if line.startswith("- ")))
    return 0


def measure_commands(sub) -> None:
    """bench, calibrate, report: measurement campaigns on the GPU."""
    p = sub.add_parser("bench", help="benchmark the examples against cuBLAS, PyTorch eager and torch.compile (GPU)",
                       description="Measure the copy bandwidth, then check (against a float64 NumPy reference) "
                                   "and time kfuse's plan, cuBLAS through CuPy, PyTorch eager and torch.compile "
                                   "on each sequence; write results.md, results.csv, env.json and PNG charts.")
    p.add_argument("--n", type=bench_size, default=None, help="size of every dimension of a script with a matrix "
                   "(default 8192; --per-call: 1024 and 8192)")
    p.add_argument("--N", type=bench_size, default=None, help="size of every dimension of a script without a "
                   "matrix (default 2^26; --per-call: 2^20 and 2^26)")
    p.add_argument("--per-call", action="store_true",
                   help="wall time per call from a Python loop (plain, repeated and bound calls, cuBLAS, torch "
                        "eager, torch.compile default and reduce-overhead) at n = 1024 / N = 2^20 and "
                        "n = 8192 / N = 2^26; writes per-call.md, per-call.csv, per-call.png")
    p.add_argument("--dtype", action="append", choices=["float32", "float64", "both"], default=None,
                   help="element type (repeatable, or 'both'; default float32)")
    p.add_argument("--seq", action="append", default=None, metavar="NAME",
                   help="sequence: an example's name (gemver) or a .kf path (repeatable; default all examples)")
    p.add_argument("--reps", type=positive_int, default=100, help="timed repetitions, median reported (default 100)")
    p.add_argument("--warmup", type=int, default=10, help="untimed calls before timing (default 10)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--out", default="bench-out", help="output folder (default bench-out)")
    p.add_argument("--no-torch-compile", action="store_true", help="skip the (slow to compile) torch.compile peer")
    json_option(p, "print the files written and kfuse's failures as JSON, or the error")
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
    json_option(p, "print the calibration file and its new entries as JSON, or the error")
    p.set_defaults(fn=cmd_calibrate)
    p = sub.add_parser("report", help="prediction report: rank of the measured best, first choice vs best, "
                                      "times to plan and search (the paper's Tables 4 and 5; GPU)")
    p.add_argument("--seq", action="append", default=None, metavar="NAME",
                   help="sequence: an example's name or a .kf path (repeatable; default all examples)")
    p.add_argument("--top", type=positive_int, default=20, metavar="K", help="plans measured per sequence (default 20)")
    p.add_argument("--n", type=bench_size, default=8192, help="every dimension of a script with a matrix "
                   "(default 8192)")
    p.add_argument("--N", type=bench_size, default=2**26, help="every dimension of a script without a matrix "
                   "(default 2^26)")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"], help="element type (default float32)")
    p.add_argument("--reps", type=positive_int, default=20, help="timed repetitions per plan, median (default 20)")
    p.add_argument("--retime", type=nonnegative_int, default=5, metavar="R",
                   help="time the first choice and the measured best again in turns, R rounds (default 5; 0: not)")
    p.add_argument("--out", default=None, help="markdown file to write (default report.md; --reprice: FILE-repriced.md)")
    p.add_argument("--random", type=int, default=0, metavar="K",
                   help="report on K random scripts of the generator instead (written beside the report)")
    p.add_argument("--seed", type=int, default=0, help="first seed of --random (default 0)")
    p.add_argument("--alt-launch-ns", type=nonnegative_float, default=None, metavar="NS",
                   help="also measure the first choice of the ranking model with this launch term (ns a kernel)")
    p.add_argument("--alt-clear-ns", type=nonnegative_float, default=None, metavar="NS",
                   help="... and this clear term (ns a kernel with reduced outputs)")
    p.add_argument("--sample", type=nonnegative_int, default=0, metavar="S",
                   help="also measure S plans a sequence sampled from those ranked after the top K (every kernel "
                        "count in turn): data for judging the model beyond its first choices (default 0)")
    p.add_argument("--reprice", default=None, metavar="FILE.json",
                   help="no GPU: price the plans a report measured (its JSON) again, with the model this machine "
                        "plans with and the --alt-* terms, against the times measured")
    json_option(p, "print the files written and every sequence's measured plans as JSON, or the error")
    p.set_defaults(fn=cmd_report)
