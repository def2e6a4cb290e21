"""The routine files of synthesized functions (``library/synth.py``), by path, in this process.

A synthesized function's file is named by the digest of what defines it, so an entry never
changes once made.  ``Library.source_text`` reads from here what no library folder holds."""
from __future__ import annotations

SOURCES: dict[str, bytes] = {}      # path -> bytes


def synthesized_source(path) -> bytes | None:
    """The bytes of a synthesized routine file, or of a shipped file its variants share (for a
    library loaded without the shipped one), by path; None for any other path."""
    return SOURCES.get(str(path))
