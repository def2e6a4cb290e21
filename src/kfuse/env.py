"""The environment variables a user sets, read and checked in one place: a bad value is a
:class:`KfuseError` naming the variable, raised before any work that would need it (the CLI
checks them as it starts), never a traceback at the first GPU call or after a calibration run."""
from __future__ import annotations

import os
import shlex
from pathlib import Path

from .errors import KfuseError


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
    ``~/.cache/kfuse``.  Not checked: reading from a folder that is not there finds nothing."""
    root = os.environ.get("KFUSE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "kfuse")
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
    """Check the variables that can be wrong in a way found only late (the CLI calls this as it
    starts): ``$KFUSE_NVRTC_OPTIONS`` must split, ``$KFUSE_CACHE_DIR`` must not name a file."""
    nvrtc_options()
    folder = cache_dir()
    if os.environ.get("KFUSE_CACHE_DIR") and folder.exists() and not folder.is_dir():
        raise KfuseError(f"KFUSE_CACHE_DIR={str(folder)!r}: exists and is not a folder")
