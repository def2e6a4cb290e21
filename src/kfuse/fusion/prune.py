"""Why implementations of a fusion were left out: the prune reasons the space and the ranking count
per fusion (``Space.pruned``), as values; ``str()`` of a reason is its sentence in ``explain()``."""
from __future__ import annotations

from enum import Enum

MAX_SPAN_LOOP_J = 2     # nested kernels looping along j: at most this many tiles along i per block


class Prune(Enum):
    """A reason an implementation was not built or not kept; the value is the sentence."""
    REFUSED = "refused by the builder"
    DOMINATED = "dominated in on-chip memory"
    UNROLLED_WITHOUT_LOOP = "unrolled with no serial loop"
    STRIPS_TOO_WIDE = "with strip widths that cannot fit these sizes (not built)"
    TALL_SPANS = f"spanning more than {MAX_SPAN_LOOP_J} tiles along i in a loop along j (not built)"
    BETWEEN_MAPPINGS = "exchanging between mappings (one without exists)"
    MAP_EXCHANGES = "a map exchanging through shared memory (one without exists)"
    SERIAL_BESIDE_STREAMS = "with a serial section in the loop beside other calls, on a full GPU (left out)"

    def __str__(self) -> str:
        return self.value


def render(counts: dict[Prune, int]) -> str:
    """The counts as ``explain()`` writes them: "3 refused by the builder, ...", zeros left out."""
    return ", ".join(f"{n} {reason}" for reason, n in counts.items() if n)
