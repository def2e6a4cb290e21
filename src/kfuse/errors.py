"""One exception hierarchy for kfuse: every error a user can cause is a KfuseError."""
from __future__ import annotations

import os


class KfuseError(Exception):
    """Base class of every error kfuse raises on purpose."""


class LibraryError(KfuseError):
    """Bad elementary-function metadata or routine source: names the file and the field."""

    def __init__(self, file: str | os.PathLike[str], field: str, message: str):
        self.file, self.field = str(file), field
        super().__init__(f"{file}: {field}: {message}")


#: characters of a script line an error shows, around the column (a line of megabytes would
#: otherwise be written whole, and again as the caret's indent)
LINE_WINDOW = 200
MESSAGE_MOST = 1000     # characters of the message itself (it may quote a name of megabytes)


def line_window(text: str, column: int, width: int = LINE_WINDOW) -> tuple[str, int]:
    """(the part of ``text`` to show, the caret's offset in it) for the 1-based ``column``: the
    whole line when it has at most ``width`` characters, else ``width`` of them around the column
    with ``...`` where the line goes on."""
    text, at = text.rstrip(), max(column - 1, 0)
    if len(text) <= width:
        return text, at
    start = min(max(at - width // 2, 0), max(len(text) - width, 0))
    end = start + width
    head = "..." if start > 0 else ""
    return head + text[start:end] + ("..." if end < len(text) else ""), len(head) + at - start


class ScriptError(KfuseError):
    """Bad script: names file:line:column and shows the offending line with a caret (at most
    ``LINE_WINDOW`` characters of it, around the column); the message (``bare``, also shown in
    ``--json`` output) is cut after ``MESSAGE_MOST`` characters."""

    def __init__(self, message: str, file: str = "<script>", line: int = 0, column: int = 0,
                 source_line: str | None = None):
        if len(message) > MESSAGE_MOST:
            message = f"{message[:MESSAGE_MOST]}... ({len(message) - MESSAGE_MOST} more characters)"
        self.file, self.line, self.column, self.bare = file, line, column, message
        text = f"{file}:{line}:{column}: error: {message}" if line else f"{file}: error: {message}"
        if source_line is not None:
            shown, caret = line_window(source_line, column)
            text += f"\n    {shown}\n    {' ' * caret}^"
        super().__init__(text)


class TraceError(ScriptError):
    """A function traced by ``@kfuse.jit`` that maps onto no program, or a traced value used in a
    way that needs its value: names the user's file:line:column and shows the line.  ``site`` is
    where the user's code did it (anything with ``file``, ``line``, ``col``, ``text``)."""

    def __init__(self, message: str, site=None):
        if site is None:
            super().__init__(message, "<traced function>")
        else:
            super().__init__(message, site.file, site.line, site.col, site.text)


class FusionError(KfuseError):
    """A plan, fusion or implementation that cannot be built (resources, illegal choice)."""


class CompileError(KfuseError):
    """NVRTC or nvcc rejected generated code; carries the log, the lines around the error and the path of the full source."""


class LaunchError(KfuseError):
    """Bad arguments to a program (shape, dtype, device, layout, aliasing) or a failed launch."""


class CalibrationError(KfuseError):
    """A calibration file or entry that cannot be used (reported and ignored), or a failed calibration."""
