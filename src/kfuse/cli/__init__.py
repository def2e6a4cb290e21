"""The ``kfuse`` command: ``main.py`` parses the command line and runs a command, ``measure.py``
holds the commands that time the GPU (bench, per-call, calibrate, report), ``cache.py`` the
cache folder's listing and clearing, ``util.py`` what they share (exit codes, errors as JSON,
argument checks)."""
from .main import main, parser

__all__ = ["main", "parser"]
