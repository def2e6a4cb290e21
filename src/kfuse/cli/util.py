"""Helpers of the command line: argument types, size and memory checks, output files, the GPU
check, plan text for --all, --json (documents and errors) and --graph."""
from __future__ import annotations
import argparse
import json
import os
import sys
from pathlib import Path
from ..errors import (CalibrationError, CompileError, FusionError, KfuseError, LaunchError, LibraryError,
                     ScriptError)

EXIT_ERROR = 1      # kfuse refused or failed
EXIT_USAGE = 2      # argparse's usage errors
EXIT_INTERRUPTED = 130
MAX_SIZE = 2**48    # no array dimension beyond this (a size, or a power such as 2^26)


def _integer_at_least(low: int, words: str):
    """An argparse type: an integer >= ``low`` (``words`` names it in the message)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {words}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected {words}, got {value}")
        return value
    return parse


positive_int = _integer_at_least(1, "a positive integer")
nonnegative_int = _integer_at_least(0, "an integer >= 0")


def nonnegative_float(text: str) -> float:
    """argparse type: a finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not (0 <= value < float("inf")):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text}")
    return value


class GpuRequiredError(KfuseError):
    """A command that runs kernels found no usable GPU (``"kind": "no_gpu"`` under --json)."""


def require_gpu(what: str) -> None:
    """Refuse a command that measures or runs on a GPU when none is usable (checked before it
    writes anything)."""
    from ..runtime.gpu import have_gpu
    if not have_gpu():
        raise GpuRequiredError(f"{what} runs kernels on a GPU and none is usable here (CuPy, a CUDA driver and a "
                         "device are needed: pip install 'kfuse[gpu]'); `kfuse compile` and `kfuse plan` "
                         "work without one")


def write_output(path: str, text: str, keep: Path | None = None, option: str = "-o",
                 kept: str = "the script") -> None:
    """Write ``text`` to ``path`` (given as ``option``) with an error that says what is wrong
    (folder missing, a folder given, no permission, an empty name -- which was stdout in silence)
    instead of a traceback; ``keep``, the command's input file (``kept`` names it), is never
    written over (``kfuse compile x.kf -o x.kf`` replaced the script with its CUDA)."""
    if not path:
        raise KfuseError(f"{option}: the file name is empty")
    out = Path(path)
    try:
        same = keep is not None and out.exists() and out.samefile(keep)
    except OSError:
        same = False
    if same:
        raise KfuseError(f"{option} {path}: is {kept} itself; give another file name")
    if out.is_dir():
        raise KfuseError(f"{option} {path}: is a folder; give a file name")
    if not out.parent.is_dir():
        raise KfuseError(f"{option} {path}: the folder {out.parent} does not exist")
    try:
        out.write_text(text)
    except OSError as e:
        raise KfuseError(f"{option} {path}: cannot write it ({e.strerror or e})") from None


def check_memory(program, dims: dict[int, int], dtype: str) -> None:
    """Refuse sizes whose arrays cannot be allocated, before allocating any: every vector and
    matrix of the script on the device (and its free memory when a GPU is known), and the float64
    copies of the reference on the host."""
    import math

    import numpy as np
    entries = sum(math.prod(dims[program.dim(d).id] for d in v.dims) for v in program.values if v.dims)
    device = entries * np.dtype(dtype).itemsize
    host = 3 * entries * 8          # inputs, their rounded copies and the reference's values, float64
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        physical = None
    sizes = ", ".join(f"{d.name}={dims[d.id]}" for d in program.dims)
    if physical and host > physical:
        raise KfuseError(f"sizes {sizes}: the check needs about {byte_text(host)} of host memory for the "
                         f"float64 reference, more than this machine has ({byte_text(physical)}); give smaller --size")
    free = device_free()
    if free is not None and device > free:
        raise KfuseError(f"sizes {sizes}: the script's arrays take {byte_text(device)} on the GPU, more than "
                         f"its free memory ({byte_text(free)}); give smaller --size")


def device_free() -> int | None:
    try:
        import cupy as cp
        return int(cp.cuda.Device().mem_info[0])
    except Exception:   # noqa: BLE001 - no CuPy or no device: nothing known
        return None


def byte_text(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n} B"


def parse_sizes(program, specs: list[str]) -> dict[int, int]:
    """--size NAME=V (a size of the script: a declared name, or ``x.len``, ``A.rows``, ``A.cols``
    of any vector or matrix, as ``kfuse.compile(sizes=...)`` reads them) or --size V (every size
    not named).  A name given an empty or a second, different value (two names of one size
    included), a bare size given twice differently, or a size the script fixes (``vector x[5]``)
    given another value is an error: the last one silently won before, or the script's own."""
    from ..compiler.api import check_literal, size_names
    by_name = size_names(program)
    default: tuple[str, int] | None = None
    named: dict[int, tuple[str, int]] = {}           # dim id -> (the --size given, its value)
    for spec in specs:
        name, eq, value = spec.partition("=")
        if not eq:
            name, value = "", spec
        elif not name.strip():
            raise KfuseError(f"--size {spec}: expected NAME=INT or INT (the name is empty)")
        try:
            size = int(value)
        except ValueError:
            raise KfuseError(f"--size {spec}: expected NAME=INT or INT") from None
        if size < 1:
            raise KfuseError(f"--size {spec}: sizes are at least 1")
        if size > MAX_SIZE:
            raise KfuseError(f"--size {spec}: sizes are at most 2^48")
        if not name:
            if default is not None and default[1] != size:
                raise KfuseError(f"--size {default[0]} and --size {spec}: two sizes for every size not named")
            default = (spec, size)
            continue
        dim = by_name.get(name.strip())
        if dim is None:
            raise KfuseError(f"--size {name}=...: the script's sizes are "
                             f"{', '.join(sorted(d.name for d in program.dims))}")
        check_literal(dim, size, f"--size {spec}")
        if dim.id in named and named[dim.id][1] != size:
            raise KfuseError(f"--size {named[dim.id][0]} and --size {spec} give one size of the script "
                             f"({dim.name}) two values")
        named[dim.id] = (spec, size)
    dims: dict[int, int] = {}
    for d in program.dims:
        got = named[d.id][1] if d.id in named else d.literal if d.literal is not None else \
            default[1] if default is not None else None
        if got is None:
            raise KfuseError(f"no size for {d.name}: give --size {d.name}=N (or --size N for all)")
        dims[d.id] = got
    return dims


def plan_json(plan) -> dict:
    from ..ir.plan import plan_to_json
    kernels = plan_to_json(plan)
    for n, k in enumerate(kernels):
        if plan.parts:
            k["predicted_us"] = round(plan.parts[n] * 1e6, 3)
    return {"predicted_us": None if plan.predicted is None else round(plan.predicted * 1e6, 3), "kernels": kernels}


def plan_line(plan, full: bool) -> str:
    """One line per plan for ``plan --all``: calls, loop, unroll, span, serial iterations (when not
    automatic), instances per block (when more than one), variants and every macro of each kernel
    (``wide16/TC256``: BY first), so that plans that differ print differently; ``full``: spelled
    out, with I and B always."""
    def kernel(k) -> str:
        text = ", ".join(kc.call.name for kc in k.calls) + f" <{k.loop} U{k.unroll}" + (f" S{k.span}" if k.span > 1 else "")
        if not full:
            text += (f" I{k.iters}" if k.iters else "") + (f" B{k.ipb}" if k.ipb > 1 else "")
        if full:
            text += f" I{k.iters or 'auto'} B{k.ipb}" + "".join(
                f" {kc.variant.name}" + ("[" + ",".join(f"{m}={v}" for m, v in kc.macros) + "]" if kc.macros else "")
                for kc in k.calls)
        else:
            text += "".join(f" {kc.variant.name}{dict(kc.macros).get('BY', '')}"     # BY, then every other macro
                            + "".join(f"/{m}{v}" for m, v in kc.macros if m != "BY") for kc in k.calls)
        return text + ">"
    return " | ".join(kernel(k) for k in plan.kernels)


def plan_dot(prog) -> str:
    """Graphviz text of the dependency graph with each kernel of the plan as a cluster."""
    return prog.graph.dot(prog.program.name, [(f"kernel {n}: {k.name}", [kc.call.index for kc in k.calls])
                                              for n, k in enumerate(prog.plan.kernels)])


def bench_size(text: str) -> int:
    """An integer, or a power written 2^26 / 2**26 (at most 2^48)."""
    t = text.replace("**", "^")
    try:
        if "^" in t:
            base, _, exp = t.partition("^")
            b, e = int(base), int(exp)
            if b < 0 or e < 0 or (b > 1 and e * (b.bit_length() - 1) > 48):
                raise argparse.ArgumentTypeError(f"{text}: sizes are between 1 and 2^48")
            value = b ** e
        else:
            value = int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or a power like 2^26, got {text!r}") from None
    if not 1 <= value <= MAX_SIZE:
        raise argparse.ArgumentTypeError(f"{text}: sizes are between 1 and 2^48")
    return value


def script_path(args) -> Path:
    """The script argument as a path: a file, or the name of a shipped example (``gemver``)."""
    path = Path(args.script)
    if not path.exists() and path.suffix in ("", ".kf") and len(path.parts) == 1:
        example = Path(__file__).resolve().parent.parent / "examples" / f"{path.stem}.kf"
        if example.is_file():
            return example
    return path


def flags_anywhere(sub) -> None:
    """-v and -q after the command too (``kfuse plan x.kf -v``): every subcommand takes them,
    with no default of its own, so that flags given before the command stay in force."""
    for p in dict.fromkeys(sub.choices.values()):
        p.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                       help="more detail (as before the command)")
        p.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                       help="errors only (as before the command)")
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                flags_anywhere(action)


# ---- --json: one document on stdout, success or failure ----------------------------------------------
class UsageExit(SystemExit):
    """argparse's usage error (exit status 2), with its message kept for --json."""

    def __init__(self, message: str):
        super().__init__(EXIT_USAGE)
        self.message = message


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose usage errors raise UsageExit (usage and message on stderr, as argparse
    prints them), so that ``main`` can say them as JSON too; subcommands' parsers are of this
    class as well."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        text = f"{self.prog}: error: {message}"
        print(text, file=sys.stderr)
        raise UsageExit(text)


def wants_json(argv: list[str]) -> bool:
    """--json among the options (before a bare ``--``): known before parsing, for usage errors."""
    return "--json" in (argv[:argv.index("--")] if "--" in argv else argv)


# the kind of a kfuse error under --json, most specific class first
_KINDS: tuple[tuple[type[KfuseError], str], ...] = (
    (ScriptError, "script"), (LibraryError, "library"), (GpuRequiredError, "no_gpu"),
    (CompileError, "compile"), (FusionError, "fusion"), (LaunchError, "launch"),
    (CalibrationError, "calibration"))


def error_json(kind: str, message: str, exit_code: int, **fields) -> dict:
    """The ``error`` field of a --json document: kind, message (as on stderr, without "kfuse: "),
    exit status, and what else locates it."""
    return {"kind": kind, "message": message, "exit_code": exit_code, **fields}


def kfuse_error_json(e: KfuseError) -> dict:
    """``error_json`` of a kfuse error; a script error adds file, line and column (None where
    unknown) and its message without them, a library error its file and field."""
    kind = next((k for cls, k in _KINDS if isinstance(e, cls)), "error")
    where: dict = {}
    if isinstance(e, ScriptError):
        where = {"file": e.file, "line": e.line or None, "column": e.column or None, "reason": e.bare}
    elif isinstance(e, LibraryError):
        where = {"file": e.file, "field": e.field}
    return error_json(kind, str(e), EXIT_ERROR, **where)


def print_json(doc: dict | list) -> None:
    print(json.dumps(doc, indent=1))


def json_option(p: argparse.ArgumentParser, help: str) -> None:
    """--json on a command, with no default of its own (``kfuse --json plan x.kf`` works as
    ``kfuse plan x.kf --json``; the main parser's default is False)."""
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help=help)
