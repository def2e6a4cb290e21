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
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import KfuseError
from ..ir.plan import Plan, plan_to_json
from ..ir.program import Program

HEADER = {"format": "kfuse-tuning-store", "version": 1}


def default_path() -> Path:
    root = os.environ.get("KFUSE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "kfuse")
    return Path(root) / "tuning.jsonl"


def size_class(program: Program, dims: dict[int, int]) -> str:
    return ",".join(f"{d.name}=2^{round(math.log2(max(1, dims[d.id])))}" for d in program.dims)


def store_key(program: Program, gpu: str, dtype: str, dims: dict[int, int]) -> dict:
    return {"gpu": gpu, "script": hashlib.sha256(program.source.encode()).hexdigest()[:16],
            "library": program.library_digest, "dtype": dtype, "sizes": size_class(program, dims)}


def _digest(record: dict) -> str:
    body = {k: v for k, v in record.items() if k != "sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


@dataclass
class TuningStore:
    path: Path

    def __init__(self, path: str | Path | None = None, warn=None):
        self.path = Path(path) if path is not None else default_path()
        self.warn = warn or (lambda msg: print(f"kfuse: {msg}", file=sys.stderr))

    def records(self) -> list[dict]:
        """Every valid record, oldest first (problems reported, never trusted)."""
        if not self.path.exists():
            return []
        lines = self.path.read_bytes().split(b"\n")
        try:
            header = json.loads(lines[0])
        except (json.JSONDecodeError, UnicodeDecodeError):
            header = None
        if header != HEADER:
            self.warn(f"{self.path} is not a kfuse tuning store (or another version of it): ignored")
            return []
        out = []
        for n, line in enumerate(lines[1:], 2):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                ok = isinstance(rec, dict) and rec.get("sha256") == _digest(rec)
            except (json.JSONDecodeError, UnicodeDecodeError):
                ok = False
            if not ok:
                self.warn(f"{self.path}:{n}: corrupt or torn record skipped")
                continue
            out.append(rec)
        return out

    def lookup(self, key: dict) -> dict | None:
        found = [r for r in self.records() if r.get("key") == key]
        return found[-1] if found else None

    def append(self, key: dict, plan: Plan, time_us: float, extra: dict | None = None) -> None:
        rec = {"key": key, "plan": plan_to_json(plan), "time_us": round(time_us, 3),
               "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **(extra or {})}
        rec["sha256"] = _digest(rec)
        # the leading newline ends a line torn by an earlier crash (empty lines are skipped)
        line = ("\n" + json.dumps(rec, sort_keys=True) + "\n").encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size == 0:       # a new store: the header first (O_APPEND keeps order)
                os.write(fd, (json.dumps(HEADER) + "\n").encode())
            elif not self._valid_header():
                raise KfuseError(f"{self.path} is not a kfuse tuning store; refusing to write into it")
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)

    def _valid_header(self) -> bool:
        with open(self.path, "rb") as f:
            first = f.readline()
        try:
            return json.loads(first) == HEADER
        except (json.JSONDecodeError, UnicodeDecodeError):
            return False
