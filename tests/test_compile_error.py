"""CompileError: the lines around the error in the message, the full source in a file it names (CPU)."""
import re
from pathlib import Path

from kfuse.runtime.compiler import compile_error


def test_compile_error_shows_context_and_saves_source():
    source = "\n".join(f"int line{i};" for i in range(1, 201)) + "\nint broken = ;\n"
    log = 'kfuse.cu(201): error: expected an expression\n1 error detected in the compilation of "kfuse.cu".'
    msg = str(compile_error("NVRTC", log, source))
    assert "expected an expression" in msg
    assert ">  201  int broken = ;" in msg and "  198  int line198;" in msg
    assert "line150;" not in msg and len(msg) < 1000                  # not the whole source
    path = Path(re.search(r"full source in (\S+)", msg).group(1))
    assert path.read_text() == source


def test_compile_error_without_line_numbers_still_names_the_file():
    msg = str(compile_error("nvcc", "something failed", "int x;"))
    assert "around the error" not in msg and "full source in" in msg
