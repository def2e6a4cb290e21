"""A script over several GPUs: row-block partitioning, a CPU simulation, and the SPMD entry point.

``partition`` plans a program over P ranks (local sub-scripts and collectives); ``simulate`` runs
that plan on P simulated ranks with the float64 reference; ``compile`` builds it for
``torch.distributed`` (one process per GPU) -- see ``spmd.py``."""
from .partition import Collective, Local, Partitioned, Placement, partition, row_ranges
from .simulate import simulate
from .spmd import DistributedScript, compile, gather, split

__all__ = ["compile", "split", "gather", "DistributedScript", "partition", "row_ranges", "simulate", "Partitioned", "Local", "Collective", "Placement"]
