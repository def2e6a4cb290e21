"""Reading kfuse's own files (calibration, tuning store) safely: only regular files, opened
without blocking (a FIFO put in the file's place would otherwise hang the reader), and read up to
a bound (``/dev/zero`` named by ``$KFUSE_CALIBRATION`` would otherwise fill the memory)."""
from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO

MAX_FILE_BYTES = 256 << 20      # a calibration file is well under 1 MiB
MAX_LINE_BYTES = 16 << 20       # a tuning record is a few KiB


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` opened for binary reading; OSError when it cannot be, or when it is not a regular
    file (a device, a pipe, a socket or a folder: ``errno.EINVAL``, checked on the open file)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file (a device, pipe, socket or folder)", str(path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | os.PathLike[str], limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` (OSError ``EFBIG`` beyond)."""
    with open_regular(path) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit} bytes", str(path))
    return data
