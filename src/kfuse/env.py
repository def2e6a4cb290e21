"""The environment variables a user sets, read and checked in one place: a bad value is a
:class:`KfuseError` naming the variable and the values it takes, never a value ignored silently
nor a traceback at the first GPU call or after a calibration run.  The readers (runtime, cost
store, tuning store) take their values through the helpers here; the CLI checks them all as it
starts (``check``), and docs/environment.md lists them."""
from __future__ import annotations

import os
import shlex
from pathlib import Path

from .errors import KfuseError

ON = ("on", "1", "true", "yes")
OFF = ("off", "0", "false", "no")
SWITCH_VALUES = "on or off (or 1/0, true/false, yes/no; any case)"
#: the on/off variables and their defaults (docs/environment.md)
SWITCHES = {"KFUSE_PDL": True, "KFUSE_ALTERNATE": True, "KFUSE_LOOP_MERGE": True,
            "KFUSE_LOOP_PERSISTENT": False}
#: the variables of one word out of a few, the default first
CHOICES = {"KFUSE_LOOP_WHILE": ("graph", "chunks")}
ORDER_VALUES = (0, 1, 2, 3)
NAME_MAX = 255          # bytes of one path component (Linux file systems)
PATH_MAX = 4095         # bytes of a whole path


def _given(name: str) -> str | None:
    """The variable's text, None when unset or blank (blank means the default, as unset)."""
    text = os.environ.get(name)
    return text if text is not None and text.strip() else None


def _bad(name: str, text: str, allowed: str) -> KfuseError:
    return KfuseError(f"{name}={text[:200]!r}: expected {allowed}")


def switch(name: str) -> bool:
    """An on/off variable of ``SWITCHES`` (its default when unset); any other word is an error
    (``KFUSE_LOOP_MERGE=ON`` is on, ``KFUSE_PDL=off`` is off, ``KFUSE_PDL=of`` is refused)."""
    text = _given(name)
    if text is None:
        return SWITCHES[name]
    word = text.strip().lower()
    if word in ON or word in OFF:
        return word in ON
    raise _bad(name, text, SWITCH_VALUES)


def choice(name: str) -> str:
    """A variable of ``CHOICES``: one of its words (any case), the first when unset."""
    allowed = CHOICES[name]
    text = _given(name)
    if text is None:
        return allowed[0]
    word = text.strip().lower()
    if word not in allowed:
        raise _bad(name, text, " or ".join(allowed))
    return word


def block_orders() -> list[int] | None:
    """``$KFUSE_ORDER``: the forced block order of each kernel (``o0,o1,...``, each 0 to 3), None
    when unset.  Only the form is checked here; the count is the launch's (runtime/order.py)."""
    text = _given("KFUSE_ORDER")
    if text is None:
        return None
    words = [w.strip() for w in text.split(",")]
    if not all(w.isascii() and w.isdigit() and len(w) == 1 and int(w) in ORDER_VALUES for w in words):
        raise _bad("KFUSE_ORDER", text, "o0,o1,...: one order per kernel, each 0 to 3")
    return [int(w) for w in words]


def calibration() -> tuple[bool, Path | None]:
    """``$KFUSE_CALIBRATION``: (off, the file).  ``off`` (or none, 0; any case) turns calibrated
    prediction off; any other value must name a file that exists (one that is missing would
    otherwise be skipped without a word)."""
    text = _given("KFUSE_CALIBRATION")
    if text is None:
        return False, None
    if text.strip().lower() in ("off", "none", "0"):
        return True, None
    try:
        os.stat(text)
    except (OSError, ValueError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else "not a path"
        raise _bad("KFUSE_CALIBRATION", text, f"a calibration file, or off ({why})") from None
    return False, Path(text)


def nvrtc_options() -> tuple[str, ...]:
    """The words of ``$KFUSE_NVRTC_OPTIONS`` (shell quoting), e.g. ``("-lineinfo",)``."""
    text = os.environ.get("KFUSE_NVRTC_OPTIONS", "")
    try:
        return tuple(shlex.split(text))
    except ValueError as e:
        raise KfuseError(f"KFUSE_NVRTC_OPTIONS={text[:200]!r}: {e} (the options are split as a shell "
                         "would: quote as there)") from None


def cache_dir() -> Path:
    """kfuse's cache folder: ``$KFUSE_CACHE_DIR``, else ``$XDG_CACHE_HOME/kfuse`` or
    ``~/.cache/kfuse``.  Its existence is not checked (reading from a folder that is not there
    finds nothing), but a path no file system takes (a component over 255 bytes, a path over
    4095) is a KfuseError naming the variable, not an OSError from every command."""
    given = os.environ.get("KFUSE_CACHE_DIR")
    if given:
        name, root = "KFUSE_CACHE_DIR", given
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        name = "XDG_CACHE_HOME" if xdg else "HOME"
        root = os.path.join(xdg or os.path.expanduser("~/.cache"), "kfuse")
    raw = os.fsencode(root)
    if len(raw) > PATH_MAX or any(len(part) > NAME_MAX for part in raw.split(b"/")):
        raise KfuseError(f"{name}={root[:200]!r}{'...' if len(root) > 200 else ''}: not a usable folder "
                         f"path (expected names of at most {NAME_MAX} bytes, {PATH_MAX} in all)")
    return Path(root)


def writable_folder(folder: Path, what: str) -> Path:
    """``folder`` made if missing; a KfuseError naming ``what`` when it exists but is no folder
    or cannot be made (checked before a long run that will write into it)."""
    env = " ($KFUSE_CACHE_DIR)" if os.environ.get("KFUSE_CACHE_DIR") and folder == cache_dir() else ""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise KfuseError(f"{folder}{env}: exists and is not a folder; {what} cannot be written there") from None
    except OSError as e:
        raise KfuseError(f"{folder}{env}: cannot be made ({e.strerror or e}); {what} cannot be written "
                         "there") from None
    if not folder.is_dir():
        raise KfuseError(f"{folder}{env}: is not a folder; {what} cannot be written there")
    return folder


def check() -> None:
    """Check every variable above that can be wrong (the CLI calls this as it starts, so that a
    typo is said now, not late): the cache folder, the calibration file, the switches, the
    choices and the form of ``$KFUSE_ORDER``.  ``$KFUSE_NVRTC_OPTIONS`` is checked where a
    program is compiled (api.py, runtime/compiler.py), not here: ``kfuse cache`` compiles
    nothing and works whatever it holds."""
    folder = cache_dir()
    if os.environ.get("KFUSE_CACHE_DIR") and folder.exists() and not folder.is_dir():
        raise KfuseError(f"KFUSE_CACHE_DIR={str(folder)!r}: exists and is not a folder")
    calibration()
    for name in SWITCHES:
        switch(name)
    for name in CHOICES:
        choice(name)
    block_orders()
