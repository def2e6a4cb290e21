"""Calibration files: per GPU, library digest and dtype, the measured cost of every routine.

A calibration file is JSON::

    {"format": "kfuse-calibration", "version": 1, "entries": [ENTRY, ...]}

and an entry is one calibration run::

    {"gpu": "NVIDIA H100 80GB HBM3", "library": "<digest>", "dtype": "float32",
     "device": {"sms": 132, "max_threads_per_sm": 2048, ...},
     "launch_ns": ..., "clear_ns": ..., "barrier_ns": {"1": {"256": ...}, "2": {"256": ...}},
     "routines": {"gemv(A,x)/shfl/BY=8/load_A": "<probe id>", ...},
     "probes": {"<probe id>": {"kind": "load", "atomic": false, "nesting": 2, "points": [
         {"loop": "i", "unroll": 1, "ipb": 1, "occupancy": "full", "resident": 1.0, "ns": 0.93}, ...]}},
     "kernels": {"spmv(A,x)/rows": {"by": "mean_row", "source": "1f0c2a9b7d3e", "points": [[2.0, 3.1], ...]}},
     "written": "...", "kfuse": "0.1.0", "quick": false, "sizes": {...}, "sha256": "..."}

``ns`` is the time of one execution of the routine (one instance) at the throughput of a full
GPU, launch overhead excluded.  ``kernels`` (optional) holds what no micro-kernel stands for: the
functions whose cost depends on their data -- a sparse mat-vec's on the row lengths, a stencil's
on the grid -- timed whole, alone in a kernel, each point ``[x, factor]``: at ``x`` (the mean
row length, ``by: mean_row``, or the grid's entries, ``by: entries``) the kernel took ``factor``
times what the transfer model gives its operands' bytes (``kernel_factor_key`` names the
function and variant; ``source``, the digest of the variant's source files, lets a calibration
carried to a new library keep the functions whose code did not change).  Every entry carries a
SHA-256 of its own content: an entry that does not match, does not parse or lacks a field is
reported and ignored, and so is a file that is not a calibration file -- nothing in it is trusted.

Files searched, first match wins: ``$KFUSE_CALIBRATION`` (a file, which must exist; ``off``
disables calibrated prediction), the user file (``$KFUSE_CACHE_DIR`` or ``~/.cache/kfuse``, ``calibration.json``,
written by ``kfuse calibrate``), then the calibrations shipped in ``kfuse/calibration/shipped``.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import tempfile
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..env import cache_dir, calibration, writable_folder
from ..errors import CalibrationError
from ..fileio import read_regular
from ..library.schema import Function, Routine, Variant

FORMAT = {"format": "kfuse-calibration", "version": 1}
SHIPPED = Path(__file__).with_name("shipped")
KINDS = ("load", "compute", "store")
MAX_WARNINGS = 10       # entries of a file reported one by one; the rest are counted in one line


def user_path() -> Path:
    return cache_dir() / "calibration.json"


def search_paths() -> list[Path]:
    """Calibration files in lookup order ($KFUSE_CALIBRATION's, the user's, then the shipped
    ones); none when $KFUSE_CALIBRATION is off (a file it names that is missing: a KfuseError)."""
    off, env = calibration()
    if off:
        return []
    paths = [env] if env else []
    paths.append(user_path())
    paths += sorted(SHIPPED.glob("*.json")) if SHIPPED.is_dir() else []
    return paths


@dataclass
class Calibration:
    gpu: str
    library: str
    dtype: str
    device: dict
    launch_ns: float
    clear_ns: float
    barrier_ns: dict[int, dict[int, float]]     # nesting -> threads per block -> ns per instance
    routines: dict[str, str]
    probes: dict[str, dict]
    meta: dict = field(default_factory=dict)       # written, kfuse, quick, sizes, reps
    source: str = ""                                # the file it was read from
    kernels: dict[str, dict] = field(default_factory=dict)   # kernel_factor_key -> {"by", "points"}

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.gpu, self.library, self.dtype)

    def describe(self) -> str:
        return f"{self.gpu}/{self.library} ({self.dtype})"

    def to_json(self) -> dict:
        rec = {"gpu": self.gpu, "library": self.library, "dtype": self.dtype, "device": self.device,
               "launch_ns": self.launch_ns, "clear_ns": self.clear_ns,
               "barrier_ns": {str(k): {str(t): v for t, v in sorted(b.items())}
                              for k, b in sorted(self.barrier_ns.items())},
               "routines": dict(sorted(self.routines.items())), "probes": dict(sorted(self.probes.items())),
               **({"kernels": {k: {"by": v["by"], "source": v["source"], "points": [list(p) for p in v["points"]]}
                               for k, v in sorted(self.kernels.items())}} if self.kernels else {}),
               **self.meta}
        rec["sha256"] = _digest(rec)
        return rec

    @classmethod
    def from_json(cls, rec: dict, source: str = "") -> "Calibration":
        """Validate and read an entry; raises CalibrationError saying what is wrong."""
        if not isinstance(rec, dict):
            raise CalibrationError("an entry is not a JSON object")
        if rec.get("sha256") != _digest(rec):
            raise CalibrationError("checksum mismatch (edited or corrupt)")
        try:
            gpu, lib, dtype = _str(rec["gpu"]), _str(rec["library"]), _str(rec["dtype"])
            if not isinstance(rec["device"], dict):
                raise TypeError("device is not an object")
            device = {str(k): _int(v, "device." + str(k)) for k, v in rec["device"].items()}
            for k in ("sms", "max_threads_per_sm", "max_blocks_per_sm", "smem_per_sm", "smem_reserved"):
                if device.get(k, 0) < (0 if k == "smem_reserved" else 1):
                    raise CalibrationError(f"device.{k} missing or not positive")
            launch, clear = _ns(rec["launch_ns"], "launch_ns"), _ns(rec["clear_ns"], "clear_ns")
            barrier = {int(k): {int(t): _ns(v, "barrier_ns") for t, v in _obj(b).items()}
                       for k, b in _obj(rec["barrier_ns"]).items()}
            routines = {_str(k): _str(v) for k, v in _obj(rec["routines"]).items()}
            probes = {}
            for pid, p in _obj(rec["probes"]).items():
                p = _obj(p)
                if p["kind"] not in KINDS:
                    raise CalibrationError(f"probe {pid}: kind {p['kind']!r}")
                points = []
                if not isinstance(p["points"], list):
                    raise TypeError(f"probe {pid}: points is not a list")
                for pt in p["points"]:
                    pt = _obj(pt)
                    q: dict[str, Any] = {"loop": _str(pt["loop"]), "unroll": _int(pt["unroll"], "unroll", 1),
                         "ipb": _int(pt["ipb"], "ipb", 1), "occupancy": _str(pt["occupancy"]),
                         "resident": _ns(pt["resident"], "resident"), "ns": _ns(pt["ns"], "ns")}
                    if not (q["ns"] >= 0 and 0 < q["resident"] <= 1):
                        raise CalibrationError(f"probe {pid}: point {pt} out of range")
                    points.append(q)
                if not any(q["occupancy"] == "full" for q in points):
                    raise CalibrationError(f"probe {pid}: no point at full occupancy")
                nesting = _int(p["nesting"], "nesting", 1)
                if nesting not in (1, 2) or not isinstance(p.get("atomic", False), bool):
                    raise CalibrationError(f"probe {pid}: nesting or atomic out of range")
                probes[str(pid)] = {"kind": p["kind"], "atomic": p.get("atomic", False),
                                    "nesting": nesting, "points": points}
            missing = sorted({v for v in routines.values()} - set(probes))
            if missing:
                raise CalibrationError(f"routines refer to unmeasured probe(s) {', '.join(missing[:3])}")
            if not (launch >= 0 and clear >= 0 and all(v >= 0 for b in barrier.values() for v in b.values())):
                raise CalibrationError("negative launch, clear or barrier cost")
            kernels = {_str(k): _kernel_points(k, v) for k, v in _obj(rec.get("kernels", {})).items()}
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as e:
            raise CalibrationError(f"malformed entry ({e!r})") from None
        meta = {k: rec[k] for k in ("written", "kfuse", "quick", "sizes", "reps") if k in rec}
        return cls(gpu, lib, dtype, device, launch, clear, barrier, routines, probes, meta, source, kernels)


KERNEL_BY = ("mean_row", "entries")
MAX_FACTOR = 1000.0     # a kernel 1000 times slower than its bytes at the copy bandwidth: no measurement


def _kernel_points(key: str, v) -> dict:
    """A ``kernels`` item checked: ``by`` one of KERNEL_BY, points [x, factor] with x > 0 rising
    and 0 < factor <= MAX_FACTOR."""
    v = _obj(v)
    by, source = _str(v["by"]), _str(v["source"])
    if by not in KERNEL_BY:
        raise CalibrationError(f"kernels {key}: by {by!r}, not one of {', '.join(KERNEL_BY)}")
    if len(source) != 12 or any(c not in "0123456789abcdef" for c in source):
        raise CalibrationError(f"kernels {key}: source {source!r:.40} is not 12 hex digits")
    if not isinstance(v["points"], list) or not v["points"]:
        raise CalibrationError(f"kernels {key}: no points")
    points: list[tuple[float, float]] = []
    for pt in v["points"]:
        if not isinstance(pt, list) or len(pt) != 2:
            raise CalibrationError(f"kernels {key}: a point is not [x, factor]")
        x, f = (_ns(u, f"kernels {key}") for u in pt)
        if not (x > 0 and 0 < f <= MAX_FACTOR) or (points and x <= points[-1][0]):
            raise CalibrationError(f"kernels {key}: point {pt} out of range or out of order")
        points.append((float(x), float(f)))
    return {"by": by, "source": source, "points": tuple(points)}


def kernel_factor_key(fn: Function, variant: Variant) -> str:
    """The key of a function's kernel factor (``kernels``): the function (``function_key``) and
    the variant, e.g. ``spmv(A,x)/rows``."""
    return f"{function_key(fn)}/{variant.name}"


def source_digest(lib, variant: Variant) -> str:
    """12 hex digits of the SHA-256 of a variant's source files as ``lib`` read them."""
    h = hashlib.sha256()
    for f in variant.files:
        h.update(lib.source_text(f).encode() + b"\0")
    return h.hexdigest()[:12]


def _obj(v) -> dict:
    if not isinstance(v, dict):
        raise TypeError(f"expected an object, got {type(v).__name__}")
    return v


def _str(v) -> str:
    if not isinstance(v, str):
        raise TypeError(f"expected a string, got {type(v).__name__}")
    return v


def _int(v, what: str, low: int = 0) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not low <= v < 1 << 40:
        raise ValueError(f"{what} {v!r} is not an integer >= {low}")
    return v


MAX_NS = 1e12      # 1,000 s: no launch, barrier or routine takes longer (sums of these stay finite)


def _ns(v, what: str) -> float:
    """A non-negative number of nanoseconds up to ``MAX_NS`` (JSON's Infinity, NaN, strings,
    booleans and values whose sums would overflow refused)."""
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or not 0 <= v <= MAX_NS:
        raise ValueError(f"{what} {v!r:.40} is not a number of nanoseconds from 0 to {MAX_NS:g}")
    return float(v)


def function_key(fn: Function) -> str:
    """Overloads share a name: the key names the inputs too, e.g. ``gemv(alpha,A,x)``."""
    return f"{fn.name}({','.join(p.name for p in fn.inputs)})"


def routine_key(fn: Function, variant: Variant, macros: tuple[tuple[str, int], ...], routine: Routine) -> str:
    """The key of a routine in an entry's ``routines``, e.g. ``gemv(A,x)/shfl/BY=8/load_A``.  A
    synthesized function's routine is keyed as its stand-in's (``Function.priced_as``: the
    shipped routine whose loads and stores it shares, library/synth.py)."""
    m = ",".join(f"{k}={v}" for k, v in macros) or "-"
    stand = dict(fn.priced_as).get(routine.name) if fn.priced_as else None
    if stand is not None:
        fkey, name = stand.split("/")
        return f"{fkey}/{variant.name}/{m}/{name}"
    return f"{function_key(fn)}/{variant.name}/{m}/{routine.name}"


def _digest(rec: dict) -> str:
    body = {k: v for k, v in rec.items() if k != "sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


_read_cache: dict[tuple, list[Calibration]] = {}


def read_file(path: Path, warn=None, only: tuple[str, str] | None = None) -> list[Calibration]:
    """Every valid entry of a calibration file; problems reported through ``warn``, never trusted.
    ``only`` = (library digest, dtype): just the entries that say they are for these, the others
    are neither checked nor returned.  (Valid files are read once per process while they do not
    change.)"""
    warn = warn or _warn
    path = Path(path)
    try:
        st = path.stat()
    except OSError:
        return []
    key = (str(path.resolve()), st.st_mtime_ns, st.st_size, only)
    if key in _read_cache:
        return list(_read_cache[key])
    out = _read(path, warn, only)
    if out:
        _read_cache[key] = list(out)
    return out


def _read(path: Path, warn, only: tuple[str, str] | None = None) -> list[Calibration]:
    try:
        data = json.loads(read_regular(path).decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError, ValueError) as e:
        what = ("nested too deeply" if isinstance(e, RecursionError) else e.strerror
                if isinstance(e, OSError) and e.strerror else e.__class__.__name__)
        warn(f"{path}: not a readable kfuse calibration file ({what}): ignored")
        return []
    if not isinstance(data, dict) or {k: data.get(k) for k in FORMAT} != FORMAT \
            or not isinstance(data.get("entries"), list):
        warn(f"{path}: not a kfuse calibration file (or another version of it): ignored")
        return []
    out, ignored = [], 0
    for n, rec in enumerate(data["entries"]):
        if only is not None and isinstance(rec, dict) and (rec.get("library"), rec.get("dtype")) != only:
            continue
        try:
            out.append(Calibration.from_json(rec, str(path)))
        except CalibrationError as e:
            ignored += 1
            if ignored <= MAX_WARNINGS:
                what = "/".join(str(rec.get(k, "?"))[:80] for k in ("gpu", "library", "dtype")) \
                    if isinstance(rec, dict) else "?"
                warn(f"{path}: entry {n} ({what}) ignored: {str(e)[:300]}")
    if ignored > MAX_WARNINGS:
        warn(f"{path}: ... and {ignored - MAX_WARNINGS} more entries ignored")
    return out


def write_entry(path: Path, cal: Calibration, warn=None) -> None:
    """Add (or replace: same GPU, library and dtype) an entry; the file is replaced atomically,
    under an exclusive lock (``<file>.lock``) so that two writers at once lose nothing.
    A file that exists but is not a calibration file is never overwritten."""
    path = Path(path)
    writable_folder(path.parent, "the calibration")
    lock = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        entries = []
        if path.exists():
            try:
                data = json.loads(read_regular(path).decode("utf-8"))
                ok = isinstance(data, dict) and {k: data.get(k) for k in FORMAT} == FORMAT
            except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError, ValueError):
                ok = False
            if not ok:
                raise CalibrationError(f"{path} is not a kfuse calibration file; refusing to overwrite it")
            entries = [c for c in read_file(path, warn) if c.key != cal.key]
        entries.append(cal)
        body = dict(FORMAT, entries=[c.to_json() for c in entries])
        fd, tmp = tempfile.mkstemp(prefix=".calibration-", dir=path.parent)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(body, f, indent=1, sort_keys=True)
                f.write("\n")
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    finally:
        os.close(lock)         # releases the lock


def _warn(msg: str) -> None:
    print(f"kfuse: {msg}", file=sys.stderr)


def find(gpu: str | None, library: str, dtype: str, paths: list[Path] | None = None,
         warn=None) -> tuple[Calibration | None, Calibration | None]:
    """(exact match for this GPU, fallback for another GPU) for a library digest and dtype.

    The fallback prefers a shipped calibration of an H100, then any other entry."""
    exact, others = None, []
    for path in search_paths() if paths is None else paths:
        for cal in read_file(path, warn, only=(library, dtype)):
            if cal.library != library or cal.dtype != dtype:
                continue
            if gpu is not None and cal.gpu == gpu and exact is None:
                exact = cal
            others.append(cal)
    # $KFUSE_CALIBRATION, when set, is the fallback before any other (also without a GPU)
    env = calibration()[1] if paths is None else None
    chosen = str(env) if env else None
    others.sort(key=lambda c: (c.source != chosen, Path(c.source).parent != SHIPPED, "H100" not in c.gpu))
    return exact, (others[0] if others else None)
