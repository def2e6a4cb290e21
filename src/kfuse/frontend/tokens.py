"""The script language's tokens: names, numbers, punctuation, with their line and column
(comments and white space dropped; a character of no token is an error at its place)."""
from __future__ import annotations

import re
from typing import NamedTuple

from ..errors import ScriptError

TOKEN = re.compile(r"""
    (?P<ws>[ \t\r\f\v]+) | (?P<nl>\n) | (?P<comment>\#[^\n]*)
  | (?P<num>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<punct>\*\*|<=|>=|==|!=|[;,=()\[\]\-+*/<>:])
  | (?P<bad>.)
""", re.VERBOSE)
KEYWORDS = {"input", "return"}


class Tok(NamedTuple):
    kind: str      # ident | num | punct | eof
    text: str
    line: int
    col: int


def tokenize(src: str, file: str) -> list[Tok]:
    toks: list[Tok] = []
    line, start = 1, 0
    lines = src.split("\n")        # lines as the tokenizer counts them (a form feed is white space)
    append, skip = toks.append, ("ws", "comment")
    for m in TOKEN.finditer(src):
        kind = m.lastgroup
        if kind == "nl":
            line, start = line + 1, m.end()
        elif kind in skip:
            continue
        elif kind == "bad":
            raise ScriptError(f"unexpected character {m.group()!r}", file, line, m.start() - start + 1,
                              lines[line - 1] if line <= len(lines) else "")
        else:
            append(Tok(str(kind), m.group(), line, m.start() - start + 1))
    last = toks[-1] if toks else Tok("eof", "", 1, 1)
    toks.append(Tok("eof", "end of script", last.line, last.col + len(last.text)))   # just after the last token
    return toks
