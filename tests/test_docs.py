"""docs/ holds what a reader needs and stays true (CPU): at most about 40 files and no run logs,
patches or scripts; every CLI command and option, every public member of CompiledScript and of a
jitted function and every environment variable kfuse reads is in its reference page; every
design-note section the code names exists; every relative link resolves."""
import argparse
import re

import pytest

from conftest import ROOT

DOCS = ROOT / "docs"
SRC = ROOT / "src" / "kfuse"


def test_docs_hold_the_product_not_a_lab_notebook():
    files = [p for p in DOCS.rglob("*") if p.is_file()]
    assert len(files) <= 40, len(files)
    assert {p.suffix for p in files} <= {".md", ".csv", ".json", ".png"}
    assert not list(ROOT.glob("*.whl"))


def _cli_actions():
    from kfuse.cli.main import parser
    todo = [("kfuse", parser())]
    while todo:
        name, p = todo.pop()
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                todo += [(f"{name} {sub}", sp) for sub, sp in a.choices.items()]
            elif not isinstance(a, argparse._HelpAction):
                yield name, a


def test_cli_page_names_every_command_and_option():
    text = (DOCS / "cli.md").read_text()
    missing = []
    for name, action in _cli_actions():
        if name != "kfuse" and f"## `{name}`" not in text:
            missing.append(name)
        missing += [f"{name} {o}" for o in action.option_strings if f"`{o}`" not in text]
    assert missing == []
    for status in ("| 0 |", "| 1 |", "| 2 |", "| 130 |"):
        assert status in text
    assert "--json" in text


def test_cli_page_lists_each_commands_options_in_its_section():
    """Each command's own options (--json included) in its section's table; -v and -q, taken by
    every command, in the global options."""
    text = (DOCS / "cli.md").read_text()
    sections = dict(re.findall(r"^#+ `(kfuse[^`]*)`\n(.*?)(?=^#)", text + "\n#", re.M | re.S))
    sections["kfuse"] = text.split("## Global options", 1)[1].split("\n## ", 1)[0]
    missing = []
    for name, action in _cli_actions():
        if name != "kfuse" and action.dest in ("verbose", "quiet"):
            continue
        missing += [f"{name} {o}" for o in action.option_strings if f"`{o}`" not in sections.get(name, "")]
    assert missing == []


def test_python_api_page_names_every_public_member():
    from kfuse.compiler.compiled import CompiledScript
    from kfuse.jit.decorator import JitFunction
    text = (DOCS / "python-api.md").read_text()
    members = {n for n in vars(CompiledScript) if not n.startswith("_")}
    members |= {f.name for f in getattr(CompiledScript, "__dataclass_fields__", {}).values() if not f.name.startswith("_")}
    missing = [n for n in sorted(members) if not re.search(rf"`(prog\.)?{n}\b", text)]
    jit = [n for n in vars(JitFunction) if not n.startswith("_")]
    missing += [f"jit {n}" for n in jit if not re.search(rf"`fn\.{n}\b", text)]
    assert missing == []


def test_environment_page_names_every_variable():
    used = set()
    for path in SRC.rglob("*.py"):
        used |= set(re.findall(r"\bKFUSE_[A-Z_]+\b", path.read_text()))
    text = (DOCS / "environment.md").read_text()
    assert used and sorted(v for v in used if f"`{v}`" not in text) == []


def test_design_sections_the_code_names_exist():
    headings = set(re.findall(r"^#+ (.+)$", (DOCS / "design.md").read_text(), re.M))
    named = set()
    for path in list(SRC.rglob("*.py")):
        text = " ".join(path.read_text().split())
        named |= {m.group(1) for m in re.finditer(r"docs/design\.md, ['\"]([^'\"]+)['\"]", text)}
    assert named and sorted(named - headings) == []


@pytest.mark.parametrize("page", sorted(p.name for p in (ROOT / "docs").glob("*.md")))
def test_relative_links_resolve(page):
    text = (DOCS / page).read_text()
    links = [link for link in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text)]
    assert [link for link in links if not (DOCS / link).exists()] == []
