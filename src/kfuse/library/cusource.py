"""A light scan of a library ``.cu`` file: the routines it defines, their template parameters and
parameter counts, and which of them (directly or through helpers in the file) call a barrier.

Not a C++ parser: enough for the conventions the README's "Library format" states (each routine
a function template at namespace scope, ``template <int MACRO, ..., class V, ...>``).
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator

from ..errors import LibraryError
from .schema import Variant

# block-wide barriers in any spelling the scan can see: the intrinsics, PTX in asm strings (bar.*,
# barrier.*; strings are kept for this scan), the prelude's cluster barrier, cooperative groups
# (their sync() is a barrier) -- and token pasting (##), through which no scan can see
BARRIERS = re.compile(r"\b(?:__syncthreads\w*|__barrier_sync|kf_cluster_sync|bar(?:rier)?\.\w+"
                      r"|cooperative_groups|this_thread_block|this_grid|this_cluster|thread_block|grid_group"
                      r"|cluster_group|barrier_(?:arrive|wait|sync)\w*)\b|##")
# lane exchanges: the *_sync intrinsics (shuffles, votes, match, reduce), __syncwarp, and the
# prelude's helpers built on them (codegen/prelude.cuh; tests/test_trust.py keeps this list whole)
PRELUDE_WARP_WIDE = ("kf_warp_sum", "kf_warp_max", "kf_warp_min", "kf_lanes_sum")
# prelude functions that exchange values only between the lanes present (__activemask), so any
# subset of a warp may call them: the float64 paired stores and the vector view's put4 that uses them
PRELUDE_LANE_SAFE = ("kf_store16_paired", "put4")
WARP_WIDE = re.compile(r"\b(__\w+_sync|__syncwarp|__activemask|" + "|".join(PRELUDE_WARP_WIDE) + r")\b")
_DEF = re.compile(r"(?:\btemplate\s*<(?P<tpl>[^<>{};]*(?:<[^<>{};]*>[^<>{};]*)*)>\s*)?"
                  r"(?P<head>(?:[A-Za-z_][\w:<>,*&\s]*?)\s)?"
                  r"(?P<name>[A-Za-z_]\w*)\s*\((?P<params>[^{};]*?)\)\s*(?:const\s*)?(?:noexcept\s*)?\{")
_MACRO = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)(.*)$", re.M)
_KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "do", "else", "catch"}


@dataclass(frozen=True)
class Definition:
    name: str
    template: tuple[tuple[str, str], ...] | None     # (kind, name): kind int | class | other
    params: tuple[str, ...]                          # each parameter's text, ix first
    line: int
    body: str
    literal_body: str = ""                           # the body with string literals kept

    @property
    def nparams(self) -> int:
        return len(self.params)


def strip_comments(text: str, strings: bool = False) -> str:
    """Comments and string/char literals blanked (newlines kept, so line numbers stay right);
    with ``strings``, literals are kept (an asm statement's PTX is in one)."""
    out, i = [], 0
    pattern = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
    for m in pattern.finditer(text):
        out.append(text[i:m.start()])
        s = m.group(0)
        if s[0] != "/" and strings:
            out.append(s)
        else:
            out.append(re.sub(r"[^\n]", " ", s) if s[0] == "/" else s[0] + " " * (len(s) - 2) + s[-1])
        i = m.end()
    out.append(text[i:])
    return "".join(out)


def _split_top(text: str) -> list[str]:
    parts: list[str] = []
    depth, cur = 0, list[str]()
    for ch in text:
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    last = "".join(cur).strip()
    if last or parts:
        parts.append(last)
    return [p for p in parts if p] if parts != [""] else []


def _template(text: str) -> tuple[tuple[str, str], ...]:
    out = []
    for p in _split_top(text):
        p = p.split("=", 1)[0].strip()
        words = p.replace("...", " ").split()
        if not words:
            continue
        kind = "class" if words[0] in ("class", "typename") else ("int" if words[0] in ("int", "unsigned")
                                                                   else "other")
        out.append((kind, words[-1] if len(words) > 1 else ""))
    return tuple(out)


def _body_end(text: str, start: int) -> int:
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    return len(text)


def blank_preprocessor(clean: str) -> str:
    """Preprocessor lines of comment-free text blanked (same length, newlines kept): a
    ``#define`` body is not code."""
    return re.sub(r"^[ \t]*#[^\n]*", lambda m: " " * len(m.group(0)), clean, flags=re.M)


def _definitions(code: str) -> Iterator[tuple[re.Match[str], int]]:
    """(match, end of the body) of each function defined at namespace scope in ``code``
    (comments stripped, preprocessor lines blanked); a definition's body is skipped whole."""
    pos = 0
    while (m := _DEF.search(code, pos)):
        end = _body_end(code, m.end() - 1)
        if m.group("name") not in _KEYWORDS:
            yield m, end
        pos = end


def function_spans(code: str) -> dict[str, list[tuple[int, int]]]:
    """Name -> (start, end) of each of its definitions at namespace scope in ``code`` (comments
    stripped and preprocessor lines blanked, as by ``blank_preprocessor(strip_comments(text))``)."""
    spans: dict[str, list[tuple[int, int]]] = {}
    for m, end in _definitions(code):
        spans.setdefault(m.group("name"), []).append((m.start(), end))
    return spans


def scan(text: str) -> tuple[dict[str, list[Definition]], set[str]]:
    """(name -> definitions at namespace scope, names that reach a barrier)."""
    defs, macros = _parse(text)
    return defs, _barriers(defs, macros)


def _barriers(defs: dict[str, list[Definition]], macros: dict[str, str]) -> set[str]:
    """Names reaching a barrier, the bodies searched with their string literals (asm PTX) kept."""
    literal = {n: [replace(d, body=d.literal_body) for d in ds] for n, ds in defs.items()}
    return _reaching(literal, macros, BARRIERS)


def _parse(text: str) -> tuple[dict[str, list[Definition]], dict[str, str]]:
    """(name -> definitions at namespace scope, macro name -> body with its literals kept)."""
    clean = strip_comments(text)
    literal = strip_comments(text, strings=True)        # same length: the same offsets
    macros = {m.group(1): m.group(2) for m in _MACRO.finditer(literal)}
    code = blank_preprocessor(clean)
    defs: dict[str, list[Definition]] = {}
    for m, end in _definitions(code):
        name = m.group("name")
        brace = m.end() - 1
        tpl = _template(m.group("tpl")) if m.group("tpl") is not None else None
        params = _split_top(m.group("params"))
        if params == ["void"]:
            params = []
        defs.setdefault(name, []).append(Definition(name, tpl, tuple(params),
                                                    code.count("\n", 0, m.start("name")) + 1,
                                                    code[brace:end], literal[brace:end]))
    return defs, macros


def by_reference(param: str) -> bool:
    """Whether a parameter's declaration makes it a reference (``V& e``, ``const V& e``, a
    forwarding ``V&& e``): an ``&`` outside its template arguments and default value."""
    text, prev = param, None
    while text != prev:                                 # template arguments, innermost first
        prev, text = text, re.sub(r"<[^<>]*>", " ", text)
    return "&" in text.split("=", 1)[0]


def _as_reference(param: str) -> str:
    """The parameter declared as a reference instead (``T1 a1`` -> ``T1& a1``), for a message."""
    m = re.fullmatch(r"(?P<type>.*?\S)\s+(?P<name>[A-Za-z_]\w*)", param.split("=", 1)[0].strip())
    return f"{m.group('type')}& {m.group('name')}" if m else "V& e"


def _reaching(defs: dict[str, list[Definition]], macros: dict[str, str], pattern: re.Pattern) -> set[str]:
    """Names of the definitions and macros whose body matches ``pattern`` or names one that does
    (helpers, transitively)."""
    found = {n for n, b in macros.items() if pattern.search(b)}
    found |= {n for n, ds in defs.items() if any(pattern.search(d.body) for d in ds)}
    changed = True
    while changed:
        changed = False
        for n, ds in defs.items():
            if n not in found and any(re.search(rf"\b{re.escape(s)}\b", d.body) for d in ds for s in found):
                found.add(n)
                changed = True
        for n, b in macros.items():
            if n not in found and any(re.search(rf"\b{re.escape(s)}\b", b) for s in found):
                found.add(n)
                changed = True
    return found


def warp_wide(text: str) -> set[str]:
    """Names in a CUDA source that exchange values between the lanes of a warp (shuffles, votes,
    the prelude's warp sums), directly or through helpers: all 32 lanes of a warp must call them."""
    defs, macros = _parse(text)
    return _reaching(defs, macros, WARP_WIDE)


def _source_text(ctx, source: Path, where: str) -> str:
    """The text of a routine file as the loader read it (``ctx.sources``: never read again)."""
    data = ctx.sources.get(source.name)
    if data is None:
        raise ctx.fail(where, f"{source.name}: not among the library folder's .cu files")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise LibraryError(source, "source", f"not UTF-8 text (byte {e.start})") from None


@functools.lru_cache(maxsize=64)
def _scan(text: str):
    defs, macros = _parse(text)
    return defs, _barriers(defs, macros), _reaching(defs, macros, WARP_WIDE)


def defining_file(lib, files: tuple[Path, ...], fn: str) -> Path:
    """The first of a variant's routine files that defines ``fn`` at namespace scope (scanned as
    ``check_definitions`` scans them, in the text ``lib`` read at load; the loader has checked
    that one does)."""
    return next((f for f in files if fn in _scan(lib.source_text(f))[0]), files[0])


def check_definitions(ctx, v: "Variant", where: str) -> frozenset[str]:
    """Every routine is defined in the variant's source, as a template whose leading parameters
    are the variant's macros in order (then classes), taking ix plus one parameter per argument,
    each element it writes or accumulates by reference (by value it would write a copy, and the
    output would be lost), and never reaching a barrier (the compiler places ``__syncthreads()``).
    Returns the names of the routines that exchange values between lanes (``warp_wide``)."""
    defs: dict[str, list] = {}
    syncing: set[str] = set()
    lanes: set[str] = set()
    file_of: dict[str, str] = {}
    for f in v.files:          # a variant of several files: routines and helpers from any of them
        d, sy, la = _scan(_source_text(ctx, f, f"{where}.source"))
        for name, found in d.items():
            defs.setdefault(name, []).extend(found)
            file_of.setdefault(name, f.name)
        syncing |= sy
        lanes |= la
    macros = list(v.template_macros)
    want = ", ".join([f"int {m}" for m in macros] + ["class ..."])
    for r in v.routines:
        rw = f"{where}.routine.{r.name}.fn"
        found = defs.get(r.fn)
        if not found:
            raise ctx.fail(rw, f"{r.fn} is not defined in {', '.join(f.name for f in v.files)}")

        def fits(d: Definition) -> bool:
            if d.template is None:
                return not macros and not any(a.kind == "element" for a in r.args)
            lead = d.template[:len(macros)]
            return lead == tuple(("int", m) for m in macros) and all(k == "class" for k, _ in d.template[len(macros):])

        fitting = [d for d in found if fits(d)]
        if not fitting:
            d = found[0]
            got = "no template" if d.template is None else \
                "<" + ", ".join(f"{k} {n}".strip() for k, n in d.template) + ">"
            raise ctx.fail(rw, f"{r.fn} ({file_of[r.fn]}:{d.line}) has template parameters {got}; "
                           f"the variant's macros need <{want}>")
        counted = [d for d in fitting if d.nparams == 1 + len(r.args)]
        if not counted:
            d = fitting[0]
            raise ctx.fail(rw, f"{r.fn} ({file_of[r.fn]}:{d.line}) takes {d.nparams} parameters; "
                           f"the routine passes ix and {len(r.args)} argument(s)")
        # (k, arg) of each written element a definition takes by value (parameter k, ix being 0);
        # one definition taking them all by reference is enough, as for the count (an overload by
        # value beside it makes the call ambiguous: a compile error, not a lost output)
        written = [(k, a) for k, a in enumerate(r.args, start=1) if a.kind == "element" and a.mode != "r"]
        copies = [[(k, a) for k, a in written if not by_reference(d.params[k])] for d in counted]
        if all(copies):
            d, (k, a) = counted[0], copies[0][0]
            verb = "writes" if a.mode == "w" else "accumulates"
            into = "writes" if a.mode == "w" else "accumulates into"
            raise ctx.fail(rw, f"{r.fn} ({file_of[r.fn]}:{d.line}) takes {a.name}, the element it {verb} "
                           f"(mode {a.mode}), by value: parameter {k + 1} `{d.params[k]}` must be a "
                           f"reference (`{_as_reference(d.params[k])}`), else the routine {into} a copy "
                           "and the output is lost")
        if r.fn in syncing:
            raise ctx.fail(rw, f"{r.fn} ({file_of[r.fn]}) calls __syncthreads() or another barrier (or "
                           "pastes tokens with ##, which this check cannot see through): routines never "
                           "do, the compiler places barriers")
    return frozenset(r.name for r in v.routines if r.fn in lanes)
