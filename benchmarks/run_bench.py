"""The paper's evaluation against cuBLAS, PyTorch eager and torch.compile: the same as
``kfuse bench`` (see ``kfuse bench --help``), e.g.

    PYTHONPATH=src python3 benchmarks/run_bench.py --dtype both --out bench-out
"""
import sys

from kfuse.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
