"""What a benchmark run produces: one record per sequence x dtype x contender, plus the facts
about each sequence (sizes, flops, traffic) and the run (copy bandwidth, environment).

Plain data only: the harness fills it in, the report reads it, tests build it by hand.
"""
from __future__ import annotations

from dataclasses import dataclass, field

KFUSE = "kfuse"
CUBLAS = "cuBLAS"
TORCH_EAGER = "torch eager"
TORCH_COMPILE = "torch.compile"
PEERS = (CUBLAS, TORCH_EAGER, TORCH_COMPILE)
CONTENDERS = (KFUSE, *PEERS)
COLOURS = {KFUSE: "C0", CUBLAS: "C1", TORCH_EAGER: "C2", TORCH_COMPILE: "C3"}   # the same in every chart

# status of a record
OK = "ok"              # checked against the reference, then timed
WRONG = "WRONG"        # failed the check: not timed
ERROR = "error"        # raised while preparing, checking or timing (the note says what)
NOT_AVAILABLE = "n/a"  # the peer's library is not importable (or was skipped on request)
MISSING = "missing"    # no peer written for this sequence
STATUSES = (OK, WRONG, ERROR, NOT_AVAILABLE, MISSING)

# The paper's order of the sequences (its Table 2) and their names there.
PAPER_ORDER = ("axpydot", "atax", "bicgk", "sgemv", "sgemvt", "sscal", "gemver", "gesummv", "madd",
               "vadd", "waxpby")
_DISPLAY = {"bicgk": "BiCGK"}


def display_name(stem: str) -> str:
    """'gemver' -> 'GEMVER', 'bicgk' -> 'BiCGK' (the paper's spelling)."""
    return _DISPLAY.get(stem, stem.upper())


@dataclass(frozen=True)
class Record:
    """One contender on one sequence in one element type."""
    sequence: str               # example file stem, e.g. "gemver"
    dtype: str                  # float32 | float64
    contender: str              # one of CONTENDERS
    status: str                 # one of STATUSES
    time_us: float | None = None    # median CUDA-event time (status ok only)
    q1_us: float | None = None      # its first and third quartiles (the spread; when the timer gives them)
    q3_us: float | None = None
    error: float | None = None      # worst relative error over the outputs (when checked)
    tolerance: float | None = None
    note: str = ""

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")
        if (self.time_us is not None) != (self.status == OK):
            raise ValueError("a time is recorded exactly for records with status ok")
        if (self.q1_us is None) != (self.q3_us is None) or (self.q1_us is not None and self.time_us is None):
            raise ValueError("quartiles are recorded both or neither, and only beside a time")


@dataclass(frozen=True)
class SequenceInfo:
    """The facts of one sequence at the run's sizes, the same for every contender."""
    sequence: str
    dtype: str
    sizes: dict[str, int]       # script dimension name -> size
    flops: int                  # cost.counts.flops
    plan_bytes: int             # cost.counts.traffic: what kfuse's plan moves
    onepass_bytes: int          # cost.counts.compulsory_traffic: each input read once, each output written once
    input_bytes: int            # bytes of the array inputs (what L2 rotation is sized by)
    kernels: int                # kernels kfuse launches per call
    input_sets: int = 1         # input sets rotated between repetitions (1: data larger than L2)
    plan: str = ""              # kfuse's plan, one kernel per ";" (calls and variants: Plan.summary)
    tuned: bool = False         # the plan came from the tuning store (else the model's first choice)


@dataclass
class BenchRun:
    """A whole run: settings, ceiling, environment, sequences and records (in run order)."""
    n: int
    N: int
    reps: int
    warmup: int
    copy_gbps: float            # device-to-device copy bandwidth, bytes read plus written
    copy_bytes: int             # size of the copied buffer
    l2_bytes: int
    env: dict = field(default_factory=dict)
    peer_notes: dict[str, str] = field(default_factory=dict)   # contender -> why it did not run
    sequences: list[SequenceInfo] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)

    def record(self, sequence: str, dtype: str, contender: str) -> Record | None:
        return next((r for r in self.records if (r.sequence, r.dtype, r.contender) == (sequence, dtype, contender)),
                    None)

    def dtypes(self) -> list[str]:
        return list(dict.fromkeys(s.dtype for s in self.sequences))

    def infos(self, dtype: str) -> list[SequenceInfo]:
        return [s for s in self.sequences if s.dtype == dtype]
