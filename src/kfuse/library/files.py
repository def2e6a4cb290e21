"""Reading a library's files: bytes and TOML, every failure a :class:`LibraryError` naming the file."""
from __future__ import annotations

import tomllib
from pathlib import Path

from ..errors import LibraryError
from .fields import PLAIN


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


def read_folder(root: Path) -> dict[str, bytes | None]:
    """Name -> bytes of the ``.toml`` and ``.cu`` files directly in ``root``; ``None`` for a
    ``.cu`` link that leads out of the folder (refused if a variant names it)."""
    if not root.is_dir():
        raise LibraryError(root, "folder", "is not a directory" + ("" if root.exists() else " (nothing is there)"))
    try:
        folder = root.resolve()
        paths = sorted(p for p in root.iterdir() if p.suffix in (".toml", ".cu"))
    except (OSError, RuntimeError) as e:
        raise LibraryError(root, "folder", f"cannot be read ({getattr(e, 'strerror', None) or e})") from None
    out: dict[str, bytes | None] = {}
    for p in paths:
        if not PLAIN.fullmatch(p.name):
            if p.suffix == ".cu":
                continue            # never a usable source (source_file says so if one is named)
            raise LibraryError(p, "file", "a library file's name is letters, digits and _ . + - "
                               "(it is written into the CUDA module)")
        try:
            real = p.resolve()
        except (OSError, RuntimeError):
            real = None
        if p.suffix == ".cu" and (real is None or real.parent != folder or real.suffix != ".cu"):
            out[p.name] = None
            continue
        out[p.name] = read_bytes(p)
    return out
