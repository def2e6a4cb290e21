"""Cost models: predicted kernel times that rank plans (no GPU needed).

``transfer``    bytes over bandwidth plus launches, clears, atomics and barriers (H100 defaults)
``calibrated``  the measured costs of each library routine in its environment (a calibration)
``store``       calibration files: entries keyed by GPU name, library digest and dtype, validated

Every model offers the ``Model`` interface; ``choose_model`` picks the calibrated one for this
GPU (or a shipped calibration) and falls back to the transfer model with a notice.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..codegen.kernel import KernelCode


class Model(Protocol):
    """What a plan search needs of a cost model."""
    name: str
    launch_seconds: float       # the launch term of every kernel_time (s per kernel)

    def kernel_time(self, code: KernelCode, dims: dict[int, int], entries: dict[int, int],
                    itemsize: int) -> float:
        """Predicted seconds of one kernel at dimension sizes ``dims`` (dimension id -> size),
        with ``entries`` (value id -> entries) and elements of ``itemsize`` bytes."""
        ...


__all__ = ["Model"]
