"""Where the user's code made a traced operation: the site (file, line, column, source line) that
errors name (``frontend/trace.py``)."""
from __future__ import annotations

import linecache
import sys
import sysconfig
from pathlib import Path
from types import FrameType
from typing import NamedTuple

_HERE = str(Path(__file__).resolve().parent.parent)       # kfuse's own frames are skipped


class Site(NamedTuple):
    file: str
    line: int
    col: int
    text: str

    def short(self) -> str:
        return f"{Path(self.file).name}:{self.line}: {self.text.strip()}"


def user_site() -> Site:
    """The innermost frame outside kfuse: the user's line that made the operation."""
    f: FrameType | None = sys._getframe(1)
    while f is not None and f.f_code.co_filename.startswith(_HERE):
        f = f.f_back
    if f is None:
        return Site("<unknown>", 0, 0, "")
    line, col = f.f_lineno, 0
    try:
        pos = list(f.f_code.co_positions())[f.f_lasti // 2]
        if pos[0] == line and pos[2] is not None:
            col = pos[2] + 1
    except (AttributeError, IndexError):     # no column information
        pass
    return Site(f.f_code.co_filename, line, col, linecache.getline(f.f_code.co_filename, line).rstrip("\n"))


def definition_site(fn) -> Site:
    """The line that defines ``fn``: where errors about a whole function point."""
    code = fn.__code__
    return Site(getattr(code, "co_filename", "<function>"), code.co_firstlineno, 0,
                linecache.getline(code.co_filename, code.co_firstlineno).rstrip("\n"))


def raised_at(e: BaseException, default: Site) -> Site:
    """The innermost frame of an exception's traceback in the user's code: outside kfuse, Python's
    own library and installed packages (NumPy raising for the user's call names the user's line)."""
    site, tb = default, e.__traceback__
    paths = sysconfig.get_paths()
    skip = (_HERE, *{paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(k)})
    while tb is not None:
        code = tb.tb_frame.f_code
        if not code.co_filename.startswith(skip) and not code.co_filename.startswith("<frozen"):
            text = linecache.getline(code.co_filename, tb.tb_lineno).rstrip("\n")
            site = Site(code.co_filename, tb.tb_lineno, len(text) - len(text.lstrip()) + 1, text)
        tb = tb.tb_next
    return site
