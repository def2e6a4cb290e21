"""Empirical search over the top-ranked plans, and the tuning store that remembers the winners.

The store is an append-only file of JSON lines.  The first line is a header naming the format;
every record carries a SHA-256 of its own content.  A record is appended with one ``write`` on a
file opened with ``O_APPEND``, so two processes appending at once cannot interleave their lines,
and a crash mid-write leaves at most one torn last line.  On reading, a torn or corrupt record is
reported and skipped, and a file whose header is not kfuse's is reported and ignored whole:
nothing in it is trusted.  Lookups take the newest valid record for a key.

A key is (GPU name, script text hash, library digest, dtype, size class); the size class rounds
every script size to a power of two, so a winner measured at n = 8192 serves n = 8000 too.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..env import cache_dir, writable_folder
from ..errors import KfuseError
from ..fileio import MAX_LINE_BYTES, open_regular
from ..ir.plan import Plan, plan_problem, plan_to_json
from ..ir.program import Program, size_class

HEADER = {"format": "kfuse-tuning-store", "version": 1}


def default_path() -> Path:
    return cache_dir() / "tuning.jsonl"


def size_words(program: Program, dims: dict[int, int]) -> str:
    """A record's ``sizes``: each dimension's power-of-two class, by name (``n=2^13``)."""
    return ",".join(f"{d.name}=2^{e}" for d, e in zip(program.dims, size_class(program, dims)))


def store_key(program: Program, gpu: str, dtype: str, dims: dict[int, int]) -> dict:
    return {"gpu": gpu, "script": hashlib.sha256(program.source.encode()).hexdigest()[:16],
            "library": program.library_digest, "dtype": dtype, "sizes": size_words(program, dims)}


def _digest(record: dict) -> str:
    body = {k: v for k, v in record.items() if k != "sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


_KEY_FIELDS = ("dtype", "gpu", "library", "script", "sizes")


def record_problem(rec: dict) -> str | None:
    """What is wrong with a record's fields (checked even when its checksum matches), or None."""
    key = rec.get("key")
    if not isinstance(key, dict) or sorted(key) != list(_KEY_FIELDS) or \
            not all(isinstance(v, str) and len(v) < 1000 for v in key.values()):
        return "key"
    t = rec.get("time_us")
    if not (isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) and t >= 0):
        return "time_us"
    return plan_problem(rec.get("plan"))


def _parse(line: bytes):
    """A JSON value, or None for a line that does not parse (torn, corrupt, nested too deeply)."""
    try:
        return json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError, ValueError):
        return None


@dataclass
class TuningStore:
    path: Path

    def __init__(self, path: str | Path | None = None, warn=None):
        self.path = Path(path) if path is not None else default_path()
        self.warn = warn or (lambda msg: print(f"kfuse: {msg}", file=sys.stderr))

    def _lines(self, wanted: bytes | None = None):
        """(line number, record) of every valid record, oldest first; with ``wanted``, lines that
        are complete records not containing those bytes are passed over without being parsed.
        Problems are reported; None when the file is not a store (reported too)."""
        try:
            f = open_regular(self.path)
        except FileNotFoundError:
            return
        except OSError as e:
            self.warn(f"{self.path}: cannot be read ({e.strerror or e}): ignored")
            return
        with f:
            if _parse(f.readline(MAX_LINE_BYTES)) != HEADER:
                self.warn(f"{self.path} is not a kfuse tuning store (or another version of it): ignored")
                return
            for n, line in enumerate(iter(lambda: f.readline(MAX_LINE_BYTES), b""), 2):
                line = line.strip()
                if not line:
                    continue
                # a whole record is one JSON object on a line of its own ending in "}"
                if wanted is not None and line[:1] == b"{" and line[-1:] == b"}" and wanted not in line:
                    continue
                rec = _parse(line)
                if not (isinstance(rec, dict) and rec.get("sha256") == _digest(rec)):
                    self.warn(f"{self.path}:{n}: corrupt or torn record skipped")
                    continue
                problem = record_problem(rec)
                if problem:
                    self.warn(f"{self.path}:{n}: record with an invalid {problem} skipped")
                    continue
                yield rec

    def records(self) -> list[dict]:
        """Every valid record, oldest first (problems reported, never trusted)."""
        return list(self._lines())

    def lookup(self, key: dict) -> dict | None:
        """The newest valid record for ``key``.  Records are written with sorted keys, so a record
        for ``key`` contains its canonical JSON text: other records are not parsed at all."""
        wanted = json.dumps({"key": key}, sort_keys=True)[1:-1].encode()
        found = None
        for rec in self._lines(wanted):
            if rec.get("key") == key:
                found = rec
        return found

    def append(self, key: dict, plan: Plan, time_us: float, extra: dict | None = None) -> None:
        rec = {"key": key, "plan": plan_to_json(plan), "time_us": round(time_us, 3),
               "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **(extra or {})}
        rec["sha256"] = _digest(rec)
        # the leading newline ends a line torn by an earlier crash (empty lines are skipped)
        line = ("\n" + json.dumps(rec, sort_keys=True) + "\n").encode()
        writable_folder(self.path.parent, "the tuning store")
        self._create()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            if not self._valid_header():
                raise KfuseError(f"{self.path} is not a kfuse tuning store; refusing to write into it")
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)

    def _create(self) -> None:
        """A new store appears whole, header included: written to a temporary file and linked into
        place, so that of two processes creating it at once exactly one header lands."""
        if self.path.exists():
            return
        fd, tmp = tempfile.mkstemp(prefix=".tuning-", dir=self.path.parent)
        try:
            os.write(fd, (json.dumps(HEADER) + "\n").encode())
            os.fsync(fd)
            os.fchmod(fd, 0o644)
            os.close(fd)
            fd = -1
            try:
                os.link(tmp, self.path)
            except FileExistsError:
                pass                                  # another process created it first
            except OSError:                           # no hard links here: exclusive create
                try:
                    out = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                except FileExistsError:
                    return
                with os.fdopen(out, "wb") as f:
                    f.write((json.dumps(HEADER) + "\n").encode())
        finally:
            if fd >= 0:
                os.close(fd)
            os.unlink(tmp)

    def _valid_header(self) -> bool:
        try:
            with open_regular(self.path) as f:
                return _parse(f.readline(MAX_LINE_BYTES)) == HEADER
        except OSError:
            return False


def stored_plan(program: Program, search, dtype: str, tuned) -> Plan | None:
    """The tuning store's winner for this GPU, script, library, dtype and size class, if any, with
    each of its kernels keeping the planner's fusion rules (the pipeline builds it once, and
    ignores it there if it no longer builds: ``compiler/pipeline.plan_program``)."""
    if tuned is False:
        return None
    from ..fusion.legality import stored_kernel_problem
    from ..ir.graph import DependencyGraph
    from ..ir.plan import plan_from_json
    from ..runtime.gpu import gpu_name
    gpu = gpu_name()
    if gpu is None:
        return None
    store = TuningStore(None if tuned is True else tuned, warn=logging.getLogger("kfuse").warning)
    rec = store.lookup(store_key(program, gpu, dtype, search.dims))
    if rec is None:
        return None
    try:
        data = rec.get("plan")
        if not isinstance(data, list):
            raise KfuseError("the record holds no plan")
        plan = plan_from_json(program, data)
        graph = DependencyGraph(program)    # the planner's rules hold (a forged record could break them)
        for k in plan.kernels:
            refused = stored_kernel_problem(program, graph, frozenset(kc.call.index for kc in k.calls))
            if refused is not None:
                raise KfuseError(f"kernel {k.name} breaks the fusion rules ({refused})")
    except KfuseError as e:
        store.warn(f"stored plan for {program.name} ignored: {e}")
        return None
    return plan
