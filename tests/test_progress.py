"""Progress of long work (kfuse/progress.py): a tqdm bar on a terminal, a line every 10 % in a log,
nothing with -q."""
import io
import logging

import pytest

import kfuse.progress as progress


def test_log_lines_every_tenth():
    lines = []
    with progress.Progress("timing", 50, lines.append) as p:
        for _ in range(50):
            p.step()
    assert len(lines) == 11 and lines[-1].startswith("  timing: 50/50 (100%)")


@pytest.fixture
def kfuse_level():
    """Sets the "kfuse" logger's level for one test (as ``kfuse -q`` / the default would)."""
    logger = logging.getLogger("kfuse")
    old = logger.level
    yield logger.setLevel
    logger.setLevel(old)


def test_quiet_shows_nothing(kfuse_level):
    lines = []
    kfuse_level(logging.ERROR)
    with progress.Progress("timing", 5, lines.append) as p:
        for _ in range(5):
            p.step()
    assert lines == []


def test_terminal_gets_a_tqdm_bar(monkeypatch, kfuse_level):
    class Tty(io.StringIO):
        def isatty(self):
            return True
    err = Tty()
    monkeypatch.setattr(progress.sys, "stderr", err)
    kfuse_level(logging.INFO)
    lines = []
    with progress.Progress("compiling (NVRTC)", 4, lines.append) as p:
        for _ in range(4):
            p.step()
    assert lines == [] and "compiling (NVRTC)" in err.getvalue() and "4/4" in err.getvalue()
