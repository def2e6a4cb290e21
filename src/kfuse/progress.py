"""Progress of long work (calibrate, tune, report, bench), one style everywhere: a tqdm bar on
stderr when stderr is a terminal, else a log line every 10 %; nothing with ``kfuse -q`` (the
"kfuse" logger set above INFO); and where a compile's time went, stage by stage (``PassTimes``:
``kfuse plan --timings``); and where the "kfuse" logger's notices go when the program using
kfuse configured no logging (``Fallback``).

Notices (a calibration borrowed from another GPU, routines priced by the transfer model, a tuning
record ignored, ...) are warnings of the "kfuse" logger.  The command line writes them to stderr
as ``kfuse: <notice>`` (``cli/main.py``).  A Python program that configured no logging would get
them from Python's last-resort handler, bare; ``Fallback`` writes them as the command line does.
It stays silent wherever another handler takes the records (the command line's, one the program
put on "kfuse" or above it, pytest's caplog), so nothing is written twice."""
from __future__ import annotations

import logging
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

# the stages of a compile (``compiler/pipeline.py``), in data-flow order
PASSES = ("library", "parse", "space", "rank", "partition", "lower", "emit", "load")


class Progress:
    """``with Progress("timing", total) as p: ... p.step()``."""

    def __init__(self, what: str, total: int, log=None):
        self.what, self.total, self.done, self.t0 = what, max(1, total), 0, time.perf_counter()
        # quiet when the "kfuse" logger was set above INFO (kfuse -q); its default level shows progress
        self.quiet = logging.getLogger("kfuse").level > logging.INFO
        self.log = log or logging.getLogger("kfuse").info
        self.shown = -1
        self.bar = None
        if not self.quiet and sys.stderr.isatty():
            from tqdm import tqdm
            self.bar = tqdm(total=self.total, desc=f"  {what}", unit="", file=sys.stderr, leave=True,
                            dynamic_ncols=True, bar_format="{desc} {bar} {n_fmt}/{total_fmt} {elapsed}<{remaining}")

    def step(self, n: int = 1) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
            return
        frac = self.done / self.total
        if not self.quiet and int(frac * 10) > self.shown:
            self.shown = int(frac * 10)
            self.log(f"  {self.what}: {self.done}/{self.total} ({100 * frac:.0f}%), "
                     f"{time.perf_counter() - self.t0:.1f} s")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()



@dataclass
class PassTimes:
    """Seconds spent in each named pass (a pass entered twice adds up)."""
    seconds: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def __call__(self, name: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0

    def total(self) -> float:
        return sum(self.seconds.values())

    def describe(self) -> str:
        order = [p for p in PASSES if p in self.seconds] + [p for p in self.seconds if p not in PASSES]
        width = max((len(p) for p in order), default=0)
        lines = [f"  {p:{width}s} {self.seconds[p] * 1e3:9.1f} ms" for p in order]
        return "\n".join(["pass times:"] + lines + [f"  {'total':{width}s} {self.total() * 1e3:9.1f} ms"])


@contextmanager
def no_timer(name: str):
    yield


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


def install_notices() -> None:
    """Put ``Fallback`` on the "kfuse" logger (once)."""
    logger = logging.getLogger("kfuse")
    if not any(isinstance(h, Fallback) for h in logger.handlers):
        logger.addHandler(Fallback())
