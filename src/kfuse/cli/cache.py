"""What ``kfuse cache`` lists, shows and clears: the tuning store and the calibration files.

Read through the stores' public functions only (tuning/store.py, cost/store.py): nothing here
writes into them; ``clear`` removes the user's own files whole, never the shipped calibrations."""
from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

_log = logging.getLogger("kfuse")


def _tuning_path() -> Path:
    from ..tuning.store import default_path
    return default_path()


def _calibration_paths() -> list[Path]:
    from ..cost.store import search_paths, user_path
    paths = search_paths()
    return paths if user_path() in paths else [user_path(), *paths]


def _shipped(path: Path) -> bool:
    from ..cost.store import SHIPPED
    return path.parent == SHIPPED


def _tuning_records(path: Path) -> list[dict]:
    from ..tuning.store import TuningStore
    return TuningStore(path, warn=_log.warning).records()


def _calibrations(path: Path) -> list:
    from ..cost.store import read_file
    return read_file(path, warn=_log.warning)


def listing() -> list[dict]:
    """One row per file: kind, path, whether it exists, entries, whether it ships with kfuse."""
    path = _tuning_path()
    rows = [{"kind": "tuning", "path": str(path), "exists": path.exists(),
             "entries": len(_tuning_records(path)), "shipped": False}]
    for path in _calibration_paths():
        rows.append({"kind": "calibration", "path": str(path), "exists": path.exists(),
                     "entries": len(_calibrations(path)), "shipped": _shipped(path)})
    return rows


def show() -> dict:
    """Every valid tuning record (key, time, rank, date) and calibration entry (GPU, library,
    dtype, date), by file."""
    path = _tuning_path()
    tuning = [{"key": r.get("key"), "time_us": r.get("time_us"), "rank": r.get("rank"),
               "first_us": r.get("first_us"), "written": r.get("written"),
               "kernels": len(r.get("plan") or [])} for r in _tuning_records(path)]
    cals = []
    for p in _calibration_paths():
        for c in _calibrations(p):
            cals.append({"path": str(p), "gpu": c.gpu, "library": c.library, "dtype": c.dtype,
                         "written": c.meta.get("written"), "quick": c.meta.get("quick", False),
                         "routines": len(c.routines), "shipped": _shipped(p)})
    return {"tuning": {"path": str(path), "records": tuning}, "calibrations": cals}


def show_text(doc: dict) -> str:
    t = doc["tuning"]
    lines = [f"tuning store {t['path']}: {len(t['records'])} record(s)"]
    for r in t["records"]:
        k = r["key"] if isinstance(r["key"], dict) else {}
        lines.append(f"  {k.get('gpu', '?')}  script {k.get('script', '?')}  library {k.get('library', '?')}  "
                     f"{k.get('dtype', '?')}  {k.get('sizes', '?')}: {r['time_us']} us, plan rank {r['rank']}, "
                     f"{r['kernels']} kernel(s), {r['written']}")
    lines.append(f"calibrations: {len(doc['calibrations'])} entr{'y' if len(doc['calibrations']) == 1 else 'ies'}")
    for c in doc["calibrations"]:
        lines.append(f"  {c['gpu']}/{c['library']} ({c['dtype']}): {c['routines']} routines, "
                     f"{'quick, ' if c['quick'] else ''}{c['written']}  {c['path']}"
                     + (" (shipped)" if c["shipped"] else ""))
    return "\n".join(lines)


def clearable(which: list[str]) -> list[Path]:
    """The user's files ``kfuse cache clear`` considers: the tuning store and/or the user's
    calibration file (never a shipped one, nor one named by $KFUSE_CALIBRATION)."""
    from ..cost.store import user_path
    out = []
    if "tuning" in which:
        out.append(_tuning_path())
    if "calibration" in which:
        out.append(user_path())
    return out


def clear_targets(which: list[str]) -> tuple[list[Path], list[str]]:
    """(files to remove, why others are left alone).  A file is removed only when kfuse
    recognises it as its own (a tuning store's header, a calibration file's format; the lock
    beside a calibration file goes with it, unless another process holds it: then both stay), read and later removed through its folder opened
    without following a link: a cache folder that is a symbolic link is left alone whole."""
    targets, refused = [], []
    for path in clearable(which):
        kind = "tuning" if path == _tuning_path() else "calibration"
        try:
            dfd = _open_folder(path.parent)
        except FileNotFoundError:
            continue
        except OSError as e:
            refused.append(f"{path}: its folder {e.strerror or e} (a symbolic link is never followed): left alone")
            continue
        try:
            if not _exists(dfd, path.name):
                continue
            lock = path.name + ".lock"
            if kind == "calibration" and _held(dfd, lock):
                refused.append(f"{path}: a calibration is being written (its lock is held): left alone")
            elif _recognised(dfd, path.name, kind):
                targets.append(path)
                if kind == "calibration" and _exists(dfd, lock):
                    targets.append(path.with_name(lock))
            else:
                refused.append(f"{path}: not a kfuse {kind} file (or a link, device or pipe): left alone")
        finally:
            os.close(dfd)
    return targets, refused


def remove(path: Path) -> None:
    """Remove a file ``clear_targets`` chose, through its folder opened without following links."""
    dfd = _open_folder(path.parent)
    try:
        os.unlink(path.name, dir_fd=dfd)
    finally:
        os.close(dfd)


def _open_folder(folder: Path) -> int:
    return os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)


def _exists(dfd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dfd, follow_symlinks=False)
        return True
    except FileNotFoundError:
        return False


def _held(dfd: int, name: str) -> bool:
    """Another process holds the lock file ``name`` (a calibration being written, cost/store.py):
    removing it then would let a second writer lock a new file beside the first."""
    import fcntl
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)            # closing releases a lock taken here
    return False


def _recognised(dfd: int, name: str, kind: str) -> bool:
    """The file is a regular file (not a link) holding a kfuse tuning store's header, or a
    kfuse calibration file."""
    import json
    from ..cost.store import FORMAT
    from ..fileio import MAX_FILE_BYTES, MAX_LINE_BYTES
    from ..tuning.store import HEADER
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW, dir_fd=dfd)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        try:
            if kind == "tuning":
                return json.loads(f.readline(MAX_LINE_BYTES)) == HEADER
            data = json.loads(f.read(MAX_FILE_BYTES))
            return isinstance(data, dict) and {k: data.get(k) for k in FORMAT} == FORMAT
        except (ValueError, UnicodeDecodeError, RecursionError, OSError):
            return False
