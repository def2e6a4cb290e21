"""Reading a library's files: bytes and TOML, every failure a :class:`LibraryError` naming the file."""
from __future__ import annotations

import tomllib
from pathlib import Path

from ..errors import LibraryError


def read_bytes(path: Path) -> bytes:
    if not path.is_file():
        raise LibraryError(path, "file", "is not a regular file")
    try:
        return path.read_bytes()
    except OSError as e:
        raise LibraryError(path, "file", f"cannot be read ({e.strerror or e})") from None


def read_toml(path: Path) -> dict:
    return parse_toml(path, read_bytes(path))


def parse_toml(path: Path, data: bytes) -> dict:
    """The TOML table of ``data``, the bytes read from ``path`` (named in errors)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise LibraryError(path, "toml", f"not UTF-8 text (byte {e.start})") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise LibraryError(path, "toml", str(e)) from None
    except RecursionError:
        raise LibraryError(path, "toml", "nested too deeply") from None
