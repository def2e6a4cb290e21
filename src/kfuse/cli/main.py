"""Command line: kfuse compile | plan | run | bench | tune | calibrate | report | cache (bench,
calibrate and report in cli_measure).

Exit status: 0 success; 1 a kfuse error (a bad script, a missing GPU, a wrong result...);
2 a usage error (argparse: an unknown option, a malformed value)."""
from __future__ import annotations

import argparse
import logging
import os
import sys

from .util import (EXIT_ERROR, EXIT_INTERRUPTED, EXIT_USAGE, MAX_SIZE, ArgumentParser,  # noqa: F401
                       GpuRequiredError, UsageExit, bench_size, byte_text, check_memory, device_free,
                       parse_sizes, plan_json, plan_line, positive_int, require_gpu, write_output,
                       error_json, flags_anywhere, json_option, kfuse_error_json, plan_dot, print_json,
                       script_path, wants_json)
from .. import env
from .measure import measure_commands
from ..errors import KfuseError

log = logging.getLogger("kfuse")


def _on_strips(p) -> None:
    p.add_argument("--vector-on-strips", action="store_true",
                   help="let vector calls share a kernel with matrix calls on strips of whole rows (a gemv's "
                        "result used by a dot or an axpy in its kernel; off by default, experimental)")


def _named_sizes(args) -> dict[str, int] | None:
    """--size NAME=N of plan and compile, by the script's dimension names (None: the model's)."""
    if not args.size:
        return None
    from ..compiler.api import compile as kcompile
    # the script's dimensions first (an unfused compile plans nothing)
    program = kcompile(script_path(args), dtype=args.dtype, library=args.library, fuse=False).program
    dims = parse_sizes(program, args.size)
    return {d.name: dims[d.id] for d in program.dims}


def cmd_compile(args) -> int:
    from ..compiler.api import compile as kcompile
    prog = kcompile(script_path(args), dtype=args.dtype, library=args.library, fuse=not args.unfused,
                    sizes=_named_sizes(args), vector_on_strips=args.vector_on_strips)
    source = prog.cuda_source
    if args.output is not None:
        write_output(args.output, source, keep=script_path(args))
        log.info(f"wrote {args.output}: {len(prog.kernels)} kernel(s), {len(source.splitlines())} lines")
    if args.json:
        print_json({"script": str(args.script), "name": prog.program.name, "dtype": args.dtype,
                    "kernels": len(prog.kernels), "lines": len(source.splitlines()), "output": args.output,
                    **({} if args.output is not None else {"cuda_source": source}), "plan": plan_json(prog.plan)})
    elif args.output is None:
        sys.stdout.write(source)
    return 0


def cmd_plan(args) -> int:
    import itertools
    import time

    from ..compiler.api import compile as kcompile
    sizes = _named_sizes(args)
    t0 = time.perf_counter()
    prog = kcompile(script_path(args), dtype=args.dtype, library=args.library, fuse=not args.unfused, sizes=sizes,
                    vector_on_strips=args.vector_on_strips)
    elapsed = time.perf_counter() - t0
    search = prog.search
    if args.graph and not args.json:        # DOT alone, so that it pipes into Graphviz
        print(plan_dot(prog))
        return 0
    if args.json:
        doc = {"script": str(args.script), "name": prog.program.name, "dtype": args.dtype,
               "model": search.model.name if search is not None else None,
               "planned_s": round(elapsed, 6), "plan": plan_json(prog.plan)}
        if args.graph:
            doc["graph"] = plan_dot(prog)
        if search is not None and args.all:
            doc["plans"] = [plan_json(p) for p in itertools.islice(search.plans(), args.all)]
        if search is not None and args.explain:
            doc["explain"] = search.explain()
        if args.timings:
            doc["timings_s"] = {k: round(v, 6) for k, v in _with_emit(prog).seconds.items()}
        if args.loop and search is not None:
            step = _loop_step(prog)
            doc["loop_step"] = {"us": round(step.seconds * 1e6, 3), "bodies_us": round(step.bodies * 1e6, 3),
                                "graph_nodes": step.nodes, "merged_phases": step.phases, "grids": list(step.grids)}
        print_json(doc)
        return 0
    print(prog.describe())
    if search is not None:
        print(search.explain() if args.explain else search.explain().splitlines()[0])
        print(f"planned in {elapsed:.3f} s (without NVRTC); ranked by the {search.model.name}")
        if args.loop:
            step = _loop_step(prog)
            print(f"as one step of a device loop: predicted {step.seconds * 1e6:.1f} us ({step.nodes} graph node(s), "
                  f"{step.phases} merged phase(s), kernel bodies {step.bodies * 1e6:.1f} us; cost/queued.py)")
        if args.all:
            print(f"plans in predicted order (first {args.all}):")
            full = log.isEnabledFor(logging.DEBUG)
            for n, plan in enumerate(itertools.islice(search.plans(), args.all)):
                print(f"  {n + 1:4d}. {(plan.predicted or 0.0) * 1e6:9.1f} us  {plan_line(plan, full)}")
    if args.timings:
        print(_with_emit(prog).describe())
    return 0


def _plan_check(p):
    """The usage check of ``kfuse plan``'s options (``p`` its parser): options that say nothing
    with the others given are usage errors rather than dropped in silence -- --explain, --all
    and --loop need the plan search that --unfused leaves out, and --graph without --json prints
    the DOT text alone (so that it pipes into Graphviz)."""
    def check(args) -> None:
        searched = [o for o, on in (("--explain", args.explain), ("--all", args.all), ("--loop", args.loop)) if on]
        if args.unfused and searched:
            p.error(f"{', '.join(searched)}: --unfused plans one kernel per call, with no plan search to "
                    "explain, list or price")
        dropped = searched + (["--timings"] if args.timings else [])
        if args.graph and not args.json and dropped:
            p.error(f"{', '.join(dropped)}: --graph prints the DOT graph alone (to pipe into Graphviz); "
                    "add --json for the graph and the rest in one document")
    return check


def _with_emit(prog):
    """The compile's stage times and the emit stage's, timed here (the pipeline emits a module
    when its text is first needed: ``compiler/pipeline.emit``)."""
    from ..progress import PassTimes
    timer = PassTimes(dict(prog.timings.seconds))
    with timer("emit"):
        prog.artifact.own_source
    return timer


def _loop_step(prog):
    """The plan of ``prog`` priced as one step of a device loop (``cost/queued.py``)."""
    from ..cost.queued import step_price
    search = prog.search
    return step_price(search.model, prog.kernels, search.dims, search.entries, search.itemsize)


def cmd_run(args) -> int:
    from ..compiler.api import compile as kcompile
    # the sizes checked on the parsed script first (an unfused compile plans nothing and says
    # nothing), then the GPU asked for, then the plan made
    p = kcompile(script_path(args), dtype=args.dtype, library=args.library, fuse=False).program
    dims = parse_sizes(p, args.size)
    check_memory(p, dims, args.dtype)
    require_gpu("run")
    prog = kcompile(script_path(args), dtype=args.dtype, library=args.library)
    p = prog.program
    check_memory(p, dims, args.dtype)      # again, now against the GPU's free memory
    from ..reference import device_case, evaluate, relative_error
    from ..runtime.gpu import cupy
    cp = cupy()
    log.info(f"{p.name}: sizes " + ", ".join(f"{d.name}={dims[d.id]}" for d in p.dims) + f", {args.dtype}")
    dev, host, poisoned = device_case(p, dims, args.dtype, args.seed)
    got = prog.calls.outputs(out=poisoned, sync=True, **dev)
    got = got if isinstance(got, tuple) else (got,)
    ref, mag = evaluate(p, host), evaluate(p, host, magnitude=True)
    tol = 1e-5 if args.dtype == "float32" else 1e-12
    errors = {}
    for v, g in zip(p.outputs, got):
        err = relative_error(cp.asnumpy(g), ref[v.id], mag[v.id])
        errors[v.name] = err
        if not args.json:
            print(f"  {v.name:10s} error {err:.2e} (relative to the magnitude of its terms) "
                  f"{'ok' if err < tol else 'WRONG'}")
    from ..runtime.timing import median_us
    t = median_us(prog.bind(**dev), reps=args.reps, cold_l2=True)    # bound: launches only, kfuse's own outputs
    wrong = [name for name, err in errors.items() if not err < tol]
    if args.json:
        doc = {"script": str(args.script), "name": p.name, "dtype": args.dtype,
               "sizes": {d.name: dims[d.id] for d in p.dims}, "ok": not wrong, "tolerance": tol,
               "errors": {k: float(v) for k, v in errors.items()}, "time_us": round(t, 3),
               "reps": args.reps, "kernels": len(prog.kernels), "plan": plan_json(prog.plan)}
        if wrong:
            doc["error"] = error_json("wrong_result", f"{', '.join(wrong)}: error over the tolerance {tol:g} "
                                      "(relative to the magnitude of its terms)", EXIT_ERROR)
        print_json(doc)
    else:
        print(f"  time {t:.1f} us (median of {args.reps} runs, CUDA events), {len(prog.kernels)} kernel(s)")
    return EXIT_ERROR if wrong else 0


def cmd_tune(args) -> int:
    from ..compiler.api import compile as kcompile
    program = kcompile(script_path(args), dtype=args.dtype, library=args.library, fuse=False).program
    sizes = None
    if args.size:
        dims = parse_sizes(program, args.size)
        sizes = {d.name: dims[d.id] for d in program.dims}
    require_gpu("tune")            # before any planning or notice
    prog = kcompile(script_path(args), dtype=args.dtype, library=args.library, tuned=False)
    best = prog.tune(top=args.top, sizes=sizes, reps=args.reps, store=args.store or True, log=log.info)
    if args.json:
        doc = {"script": str(args.script), "name": prog.program.name, "dtype": args.dtype,
               "plan": plan_json(best.plan)}
        doc.update(getattr(best, "tuning", None) or {})
        print_json(doc)
    else:
        print(best.describe())
    return 0


def _common(p) -> None:
    p.add_argument("script", help="script file (.kf)")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"],
                   help="element type of the script's vectors and matrices (default float32)")
    p.add_argument("--library", action="append", default=None, metavar="DIR",
                   help="extra library folder (repeatable); the shipped BLAS library is always loaded")


def _script_commands(sub) -> None:
    """compile, plan, run, tune: commands on one script."""
    common = _common
    p = sub.add_parser("compile", help="generate CUDA for a script (no GPU needed)")
    common(p)
    p.add_argument("-o", "--output", help="write the CUDA source here instead of stdout")
    p.add_argument("--unfused", action="store_true", help="one kernel per call (no fusion)")
    p.add_argument("--size", action="append", default=[], metavar="NAME=N",
                   help="compile the plan for this size of a script dimension (repeatable; a bare N sets every "
                   "dimension not named; default: the model's, 8192 per matrix side, 2^24 per vector); the "
                   "code runs at any size")
    _on_strips(p)
    json_option(p, "print the kernel count, the plan and the CUDA source (its path with -o) as JSON, or the error")
    p.set_defaults(fn=cmd_compile)
    p = sub.add_parser("plan", help="print the plan: kernels, calls in each, launch configuration")
    common(p)
    p.add_argument("--graph", action="store_true",
                   help="print only the dependency graph as Graphviz DOT, each kernel a cluster "
                        "(kfuse plan X.kf --graph | dot -Tpng > plan.png)")
    json_option(p, "print the plan (and --all's plans) as JSON, or the error")
    p.add_argument("--explain", action="store_true", help="list every fusion, and why each refused one was refused")
    p.add_argument("--all", type=positive_int, nargs="?", const=20, default=0, metavar="K",
                   help="list the first K plans (default 20) in predicted order, one line each: per kernel its "
                        "calls, <loop, unroll U, span S, serial iterations I, instances per block B, each "
                        "call's variant and macros> (with -v: every macro by name, I and B always)")
    p.add_argument("--unfused", action="store_true", help="one kernel per call (no fusion)")
    p.add_argument("--timings", action="store_true",
                   help="print the time of each pipeline stage (library, parse, space, rank, partition, lower, emit)")
    p.add_argument("--size", action="append", default=[], metavar="NAME=N",
                   help="plan for this size of a script dimension (repeatable; a bare N sets every dimension "
                   "not named; default: the model's, 8192 per matrix side, 2^24 per vector)")
    p.add_argument("--loop", action="store_true",
                   help="also price the plan as one step of a device loop (kfuse.fori_loop): its kernels' bodies, "
                        "graph nodes and merged phases instead of host launches")
    _on_strips(p)
    p.set_defaults(fn=cmd_plan, check=_plan_check(p))
    p = sub.add_parser("run", help="run on random inputs, check against NumPy, print the time (GPU)")
    common(p)
    p.add_argument("--size", action="append", default=[], metavar="NAME=N",
                   help="size of a script dimension (repeatable); a bare N sets every dimension not named")
    p.add_argument("--seed", type=int, default=None, help="seed of the random inputs (default: a fresh one)")
    p.add_argument("--reps", type=positive_int, default=50, help="timed runs, median reported (default 50)")
    json_option(p, "print the errors, time and plan as JSON, or the error")
    p.set_defaults(fn=cmd_run)
    p = sub.add_parser("tune", help="measure the top-ranked plans on the GPU and remember the fastest")
    common(p)
    p.add_argument("--top", type=positive_int, default=20, help="plans to measure (default 20)")
    p.add_argument("--size", action="append", default=[], metavar="NAME=N",
                   help="sizes to tune at (default: the model's, 8192 per matrix side, 2^24 per vector)")
    p.add_argument("--reps", type=positive_int, default=30, help="timed runs per plan, median (default 30)")
    p.add_argument("--store", help="tuning store file (default $KFUSE_CACHE_DIR or ~/.cache/kfuse/tuning.jsonl)")
    json_option(p, "print the winner, its time and whether it was stored as JSON, or the error")
    p.set_defaults(fn=cmd_tune)


def _cache_commands(sub) -> None:
    p = sub.add_parser("cache", help="list, show or clear the tuning store and the calibrations",
                       description="The tuning store (winners of `kfuse tune`) and the calibration files "
                                   "(`kfuse calibrate`) kfuse reads; clear removes the user's own files only "
                                   "(never the calibrations shipped with kfuse).")
    json_option(p, "the same as --json after the action (kfuse cache --json list)")
    csub = p.add_subparsers(dest="action", required=True, metavar="{list,show,clear}", help="what to do")
    q = csub.add_parser("list", help="one line per file: path, kind, entries")
    json_option(q, "print as JSON, or the error")
    q = csub.add_parser("show", help="every tuning record and calibration entry")
    json_option(q, "print as JSON, or the error")
    q = csub.add_parser("clear", help="remove the user's tuning store and calibration file")
    q.add_argument("--tuning", action="store_true", help="only the tuning store")
    q.add_argument("--calibration", action="store_true", help="only the calibration file")
    q.add_argument("-y", "--yes", action="store_true", help="do not ask (required when stdin is not a terminal, "
                   "and with --json)")
    json_option(q, "print the files removed and those refused as JSON, or the error")
    p.set_defaults(fn=cmd_cache)


def cmd_cache(args) -> int:
    from . import cache
    if args.action == "list":
        rows = cache.listing()
        if args.json:
            print_json(rows)
        else:
            for r in rows:
                print(f"{r['kind']:11s} {r['entries']:5d} entr{'y' if r['entries'] == 1 else 'ies'}  "
                      f"{r['path']}{'' if r['exists'] else ' (none yet)'}{' (shipped)' if r['shipped'] else ''}")
        return 0
    if args.action == "show":
        doc = cache.show()
        if args.json:
            print_json(doc)
        else:
            print(cache.show_text(doc))
        return 0
    which = [k for k, on in (("tuning", args.tuning), ("calibration", args.calibration)) if on] \
        or ["tuning", "calibration"]
    targets, refused = cache.clear_targets(which)
    for why in refused:
        log.warning(why)
    if targets and not args.yes:
        if args.json or not sys.stdin.isatty():     # no question where stdout is JSON or stdin no terminal
            raise KfuseError("cache clear removes " + ", ".join(map(str, targets)) + "; confirm with --yes")
        answer = input("remove " + ", ".join(map(str, targets)) + "? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            return EXIT_ERROR
    if not targets:
        log.info("nothing to clear")
    removed: list[str] = []
    for path in targets:
        try:
            cache.remove(path)
        except OSError as e:
            raise KfuseError(f"cannot remove {path}: {e.strerror or e}") from None
        removed.append(str(path))
        log.info(f"removed {path}")
    if args.json:
        doc = {"removed": removed, "refused": list(refused)}
        if refused:
            doc["error"] = error_json("refused", "; ".join(refused), EXIT_ERROR)
        print_json(doc)
    return EXIT_ERROR if refused else 0


def _version() -> str:
    from .. import __version__
    return __version__


def parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog="kfuse", description="Automatic kernel fusion of BLAS-like scripts into CUDA",
                                 epilog="Exit status: 0 success, 1 a kfuse error (bad script, no GPU, a wrong "
                                        "result), 2 a usage error.")
    ap.add_argument("--version", action="version", version=f"kfuse {_version()}")
    ap.add_argument("-v", "--verbose", action="count", default=0, help="more detail (debug messages; plan --all: "
                    "every macro)")
    ap.add_argument("-q", "--quiet", action="store_true", help="errors only (no notices or progress)")
    ap.add_argument("--json", action="store_true", help="print one JSON document on stdout: the command's result, "
                    "or an object with an error field (kind, message, exit code) on any failure")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND",
                            help="what to do (kfuse COMMAND -h for its options)")
    _script_commands(sub)
    measure_commands(sub)
    _cache_commands(sub)
    flags_anywhere(sub)
    return ap


class _Formatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        msg = record.getMessage()
        return f"kfuse: {msg}" if record.levelno >= logging.WARNING else msg


def _configure_logging(verbose: int, quiet: bool) -> logging.Handler:
    """Messages of the "kfuse" logger to stderr: notices and progress (INFO) by default, DEBUG
    with -v, errors only with -q."""
    handler = logging.StreamHandler()         # sys.stderr as it is when a message is written
    handler.setFormatter(_Formatter())
    logger = logging.getLogger("kfuse")
    logger.addHandler(handler)
    logger.setLevel(logging.ERROR if quiet else logging.DEBUG if verbose else logging.INFO)
    logger.propagate = False
    return handler


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parser().parse_args(argv)    # usage errors exit with 2 here
        if getattr(args, "check", None):
            args.check(args)                # and options that contradict each other
    except UsageExit as e:
        if wants_json(argv):
            print_json({"error": error_json("usage", e.message, EXIT_USAGE)})
        raise
    args.argv = argv
    logger = logging.getLogger("kfuse")
    saved = (logger.level, logger.propagate)
    handler = _configure_logging(args.verbose, args.quiet)
    try:
        env.check()                 # a bad KFUSE_* value (env.py): said now, not late
        rc = args.fn(args)
        sys.stdout.flush()          # inside the try: a reader gone away is caught here
        return rc
    except KfuseError as e:
        logger.error(str(e))
        if args.json:
            print_json({"error": kfuse_error_json(e)})
        return EXIT_ERROR
    except BrokenPipeError:
        # the reader went away (kfuse plan x | head -1): stop quietly, as other tools do
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("kfuse: interrupted", file=sys.stderr)
        if args.json:
            print_json({"error": error_json("interrupted", "interrupted", EXIT_INTERRUPTED)})
        return EXIT_INTERRUPTED
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]


if __name__ == "__main__":
    sys.exit(main())
