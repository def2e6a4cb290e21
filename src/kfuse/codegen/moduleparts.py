"""The parts of a CUDA module that every module built from a library shares: the element type
and sizes, the preludes, and the library's routine files cut to what the module's code reaches
(``module.py`` assembles generated kernels' modules from them, ``barrier_check.py`` the modules
that check library routines alone)."""
from __future__ import annotations

import re
from pathlib import Path

from ..library.cusource import blank_preprocessor, function_spans, strip_comments
from ..library.schema import Library

PRELUDE = Path(__file__).with_name("prelude.cuh")
SPARSE_PRELUDE = Path(__file__).with_name("sparse.cuh")     # KfCsr: only where a kernel reads a csr matrix
DTYPES = {"float32": "float", "float64": "double"}
_IDENT = re.compile(r"[A-Za-z_]\w*")

# the head of a persistent kernel's module (``module.module_source``), and its helpers after the prelude
PERSISTENT_HEAD = """\
// A persistent kernel reads, later in its one launch, what its blocks wrote earlier: every load
// must see those writes after a grid barrier, so no pointer is __restrict__ (which would let the
// compiler use the non-coherent read-only cache).
#define __restrict__"""
PERSISTENT_HELPERS = """\
// the local barrier of a kernel run by the first n threads of a wider block (n a multiple of 32)
KF_DEVICE void kf_bar_sync(int n) { asm volatile("bar.sync 1, %0;" :: "r"(n) : "memory"); }
"""


def c_comment(text: str) -> str:
    """``text`` safe in a ``//`` comment and inside the quotes of a ``#line`` directive: a folder
    path may hold any character, and a newline, quote or backslash would end either early."""
    return "".join(c if c.isprintable() and c not in '"\\' else "?" for c in text)


def used_routines(text: str, code: str, rel: str) -> str:
    """``text`` (a library .cu file) without the namespace-scope functions that ``code`` (the
    kernels) never reaches, directly or through other functions or macros of the file.  Each
    dropped definition (with the comment just above it) becomes a ``#line`` directive, so
    compiler messages still point at the library file's own lines."""
    clean = strip_comments(text)
    blanked = blank_preprocessor(clean)
    spans = function_spans(blanked)
    macros = "\n".join(line for line in clean.splitlines() if line.lstrip().startswith("#"))
    todo = set(_IDENT.findall(code)) | set(_IDENT.findall(macros))
    keep: set[str] = set()
    while todo:
        name = todo.pop()
        if name in spans and name not in keep:
            keep.add(name)
            todo |= {w for a, b in spans[name] for w in _IDENT.findall(blanked[a:b])}
    drop = sorted(span for name, ss in spans.items() if name not in keep for span in ss)
    out, at = [], 0
    for a, b in drop:
        start = text.rfind("\n", 0, a) + 1                 # the definition's whole first line
        while start > at:                                    # and the comment lines just above it
            prev = text.rfind("\n", 0, start - 1) + 1
            if not text[prev:start].lstrip().startswith("//"):
                break
            start = prev
        stop = text.find("\n", b)
        stop = len(text) if stop < 0 else stop + 1
        out.append(text[at:start])
        out.append(f'#line {text.count(chr(10), 0, stop) + 1} "{rel}"\n')
        at = stop
    out.append(text[at:])
    directive = rf'#line \d+ "{re.escape(rel)}"\n'
    return re.sub(rf"(?:{directive}\s*)+({directive})", r"\1", "".join(out))   # one per gap


def element_defines(lib: Library, dtype: str) -> list[str]:
    """The element type and the element sizes, as every module built from ``lib`` defines them."""
    return [f"typedef {DTYPES[dtype]} real;",
            f"#define KF_SUB {lib.subvector}   // entries per subvector",
            f"#define KF_TR {lib.tile[0]}    // tile rows",
            f"#define KF_TC {lib.tile[1]}    // tile columns"]


def library_part(lib: Library, path: Path, code: str) -> list[str]:
    """The lines of a module holding one of ``lib``'s routine files: what ``code`` reaches of it
    (``used_routines``), its lines numbered as in the file."""
    rel = c_comment(f"{lib.name}/{path.name}" if path.parent == lib.root else str(path))
    return [f"// ---- library routines used by the kernels: {rel}", f'#line 1 "{rel}"',
            used_routines(lib.source_text(path), code, rel)]
