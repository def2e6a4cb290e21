"""``kfuse bench``: the paper's evaluation (its Section 5, Tables 2 and 3) on today's GPU, with
cuBLAS through CuPy, PyTorch eager and torch.compile side by side.

``run_bench(BenchOptions(...))`` measures and returns a ``BenchRun``; ``write_outputs(run,
folder)`` writes results.md, results.csv, env.json and the PNG charts.  Importing this package
needs neither a GPU nor CuPy nor PyTorch.
"""
from .harness import BenchOptions, check_then_time, default_sequences, resolve_sequences, rotation_sets, run_bench
from .records import BenchRun, Record, SequenceInfo
from .report import markdown, write_outputs

__all__ = ["BenchOptions", "BenchRun", "Record", "SequenceInfo", "run_bench", "write_outputs", "markdown",
           "check_then_time", "default_sequences", "resolve_sequences", "rotation_sets"]
