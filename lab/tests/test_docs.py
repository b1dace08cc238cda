"""The docs are the lab's contract: every option of every strata-lab command is documented in
docs/lab.md, and every option a doc shows on a strata-lab command line exists."""
import argparse
import re
from pathlib import Path

import pytest

from strata_lab.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _commands() -> dict[str, argparse.ArgumentParser]:
    p = build_parser()
    (sub,) = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    return {"": p, **sub.choices}


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {o for a in parser._actions for o in a.option_strings if o not in ("-h", "--help")}


def _mentions(text: str, option: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text) is not None


@pytest.mark.parametrize("command", sorted(_commands()))
def test_every_option_is_in_lab_md(command):
    text = (ROOT / "docs" / "lab.md").read_text()
    missing = sorted(o for o in _options(_commands()[command]) if not _mentions(text, o))
    assert not missing, f"strata-lab {command} options missing from docs/lab.md: {missing}"


def test_every_option_shown_in_the_docs_exists():
    commands = _commands()
    line_re = re.compile(r"strata-lab (" + "|".join(re.escape(c) for c in commands if c) + r")\b")
    unknown = []
    for doc in DOCS:
        for n, line in enumerate(doc.read_text().splitlines(), 1):
            for m in line_re.finditer(line):
                # `replay TRACE [options of run]` takes run's options.
                known = _options(commands["run" if m[1] == "replay" else m[1]])
                # A command runs to the end of its code span, a comment or the next command;
                # `--` ends the lab's own options (record -- PROGRAM ARGS).
                rest = re.split(r"`| #| -- |strata-lab |\.venv/bin/", line[m.end():])[0]
                unknown += [f"{doc.name}:{n}: {m[1]} {o}" for o in re.findall(r"(?<![\w-])--?[a-z][\w-]*", rest)
                            if o not in known]
    assert not unknown, "options the docs show that strata-lab does not have:\n" + "\n".join(unknown)
