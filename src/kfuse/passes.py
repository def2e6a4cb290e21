"""The pipeline's stages timed by name (``pipeline.py`` runs them): ``kfuse plan --timings`` prints
where the time went."""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field

# the stages of a compile (``pipeline.py``), in data-flow order
PASSES = ("library", "parse", "space", "rank", "partition", "lower", "emit", "load")


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
