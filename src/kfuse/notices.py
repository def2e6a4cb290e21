"""Where kfuse's notices go when the program using it configured no logging.

Notices (a calibration borrowed from another GPU, routines priced by the transfer model, a tuning
record ignored, ...) are warnings of the "kfuse" logger.  The command line writes them to stderr
as ``kfuse: <notice>`` (cli.py).  A Python program that configured no logging would get them from
Python's last-resort handler, bare; ``Fallback`` writes them as the command line does instead.  It
stays silent wherever another handler takes the records (the command line's, one the program put
on "kfuse" or above it, pytest's caplog), so nothing is written twice."""
from __future__ import annotations

import logging
import sys

PREFIX = "kfuse: "


class Fallback(logging.Handler):
    """Warnings and errors of the "kfuse" logger to stderr, ``kfuse: `` first, where no other
    handler would take them."""

    def __init__(self):
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        if _handled_elsewhere(logging.getLogger(record.name), self):
            return
        try:
            sys.stderr.write(f"{PREFIX}{self.format(record)}\n")
        except Exception:   # noqa: BLE001 - logging's rule: a handler reports, never raises
            self.handleError(record)


def _handled_elsewhere(logger: logging.Logger, fallback: logging.Handler) -> bool:
    """Whether a handler other than ``fallback`` takes ``logger``'s records (the loggers it
    propagates to included)."""
    at: logging.Logger | None = logger
    while at is not None:
        if any(h is not fallback for h in at.handlers):
            return True
        if not at.propagate:
            return False
        at = at.parent
    return False


def install() -> None:
    """Put ``Fallback`` on the "kfuse" logger (once)."""
    logger = logging.getLogger("kfuse")
    if not any(isinstance(h, Fallback) for h in logger.handlers):
        logger.addHandler(Fallback())
