"""Fusion engine: which calls may share a kernel, and the ways to implement each fusion."""
from .legality import RULES, why_not
from .space import Fusion, Implementation, enumerate_fusions, implementations

__all__ = ["RULES", "why_not", "Fusion", "Implementation", "enumerate_fusions", "implementations"]
