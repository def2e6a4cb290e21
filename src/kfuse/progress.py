"""Progress of long work (calibrate, tune, report, bench), one style everywhere: a tqdm bar on
stderr when stderr is a terminal, else a log line every 10 %; nothing with ``kfuse -q`` (the
"kfuse" logger set above INFO); and where a compile's time went, stage by stage (``PassTimes``:
``kfuse plan --timings``)."""
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
