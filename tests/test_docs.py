"""The README stays a five-minute read, and what it and docs/ say holds: every relative link (and its anchor)
resolves, the boot lines it shows are the ones deploy/boot ships, its commands parse with the real CLI, its
figures are the measured ones recorded in docs/benchmarks.md, and docs/formats.md's version numbers are the
code's."""

from __future__ import annotations

import importlib
import os
import re
import shlex
from collections import Counter
from pathlib import Path

import pytest

from cachekeeper.cli import _register, cli

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
BOOT = REPO / "deploy" / "boot"
README_MAX_LINES = 150
FENCE = re.compile(r"^(```|~~~)")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks (a `# comment` in a shell block is no heading, a `[x](y)` no link)."""
    out: list[str] = []
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
        elif not fenced:
            out.append(line)
    return out


def code_blocks(text: str, langs: tuple[str, ...] = ("bash", "sh", "ini")) -> list[str]:
    """The bodies of the fenced blocks of those languages (a diagram or a Python block is not a command)."""
    return [body for lang, body in re.findall(r"^```([a-z]*)\n(.*?)^```", text, re.S | re.M) if lang in langs]


def section(text: str, heading: str) -> str:
    """From `## heading` to the next `## ` heading."""
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: lowercased, punctuation but `-` and `_` dropped, spaces as `-`."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: Counter[str] = Counter()
    found: set[str] = set()
    for line in prose_lines(path.read_text()):
        m = re.match(r"^#{1,6} (.+?)\s*#*\s*$", line)
        if m:
            base = github_anchor(m.group(1))
            found.add(base if not seen[base] else f"{base}-{seen[base]}")   # GitHub numbers a repeated heading
            seen[base] += 1
    return found


def broken_links(doc: Path, root: Path = REPO) -> list[str]:
    broken = []
    for line in prose_lines(doc.read_text()):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z+.-]*:", target):       # https:, mailto: ... : not this repository's
                continue
            path_part, _, anchor = target.partition("#")
            dest = (doc.parent / path_part).resolve() if path_part else doc
            if not dest.exists():
                broken.append(f"{doc.relative_to(root)}: {target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{doc.relative_to(root)}: {target}: no heading #{anchor} in {dest.relative_to(root)}")
    return broken


def test_the_readme_is_a_five_minute_read() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; the reference belongs in docs/"


@pytest.mark.parametrize("doc", [README, *DOCS], ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves_to_a_file_and_heading(doc: Path) -> None:
    assert broken_links(doc) == []


def test_the_link_check_sees_a_broken_file_and_a_broken_anchor(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A title: `x` (y)\n\n[ok](#a-title-x-y) [gone](b.md) [bad](#nope)\n"
                                   "```sh\n# not a heading [not a link](c.md)\n```\n")
    assert broken_links(tmp_path / "a.md", tmp_path) == ["a.md: b.md: no such file",
                                                         "a.md: #nope: no heading #nope in a.md"]


def test_the_readme_names_the_two_commands_and_they_exist() -> None:
    [block] = code_blocks(section(README.read_text(), "Try it on a fresh machine"))
    commands = [line.split()[0] for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert commands == ["scripts/demo", "scripts/test"]
    assert all(os.access(REPO / c, os.X_OK) for c in commands)


def _normalized(text: str) -> str:
    return " ".join(text.split())


def readme_boot_lines() -> list[str]:
    """Every `cachekeeper` line of the README's boot section (comments skipped)."""
    blocks = code_blocks(section(README.read_text(), "The boot lines a team copies"))
    return [line for b in blocks for line in b.splitlines()
            if "cachekeeper " in line and not line.lstrip().startswith("#")]


def test_the_readmes_boot_lines_are_the_ones_deploy_boot_ships() -> None:
    """A boot line copied from the README is the line the validated files under deploy/boot hold, to the
    byte but for white space (a YAML folded block splits one)."""
    shipped = [_normalized(p.read_text()) for p in sorted(BOOT.rglob("*")) if p.is_file()]
    lines = readme_boot_lines()
    assert len(lines) >= 5, "the systemd, Kubernetes and EC2 lines"
    missing = [line for line in lines if not any(_normalized(line) in text for text in shipped)]
    assert missing == []


def _cli_argv(line: str) -> list[str] | None:
    """argv after `cachekeeper` of a shell or unit-file line, with the units' ${VAR} as hydrate.env sets them."""
    env = dict(re.findall(r"^(\w+)=(.*)$", (BOOT / "systemd" / "hydrate.env").read_text(), re.M))
    line = re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], line)
    inner = re.search(r'\$\((cachekeeper [^)]*)\)', line)      # eval "$(cachekeeper hydrate ...)"
    text = inner.group(1) if inner else re.sub(r"^Exec\w+=-?", "", line.strip())
    argv = shlex.split(text.split(" > ")[0], comments=True)
    return argv[1:] if argv and argv[0].rsplit("/", 1)[-1] == "cachekeeper" else None


def test_every_cachekeeper_line_in_the_readme_parses_with_the_real_cli() -> None:
    text = README.read_text()
    lines = [line for b in code_blocks(text) for line in b.splitlines() if not line.lstrip().startswith("#")]
    calls = [argv for argv in map(_cli_argv, lines) if argv]
    assert len(calls) >= 9, "Using it (4) and the boot lines (5)"
    _register()
    for argv in calls:
        command = cli.commands[argv[0]]
        command.make_context(argv[0], argv[1:])                # an unknown flag or a bad value raises here


def readme_figures() -> list[str]:
    """The seconds and the fractions of cold ("1/8") the README's "What you get" quotes."""
    return re.findall(r"\b\d+\.\d+ s\b|\b1/\d+\b", section(README.read_text(), "What you get"))


def test_the_readmes_figures_are_the_measured_ones_in_docs_benchmarks() -> None:
    bench = _normalized((REPO / "docs" / "benchmarks.md").read_text())
    figures = readme_figures()
    assert len(figures) >= 10, "cold, cache dir and precompiled for two pipelines, and their fractions of cold"
    assert [f for f in figures if f not in bench] == []
    assert "benchmarks/cold_start.py --pipeline" in section(README.read_text(), "What you get")


def versions_table() -> list[tuple[str, int, str, str]]:
    """(format, version, module, constant) rows of docs/formats.md's versions table."""
    text = section((REPO / "docs" / "formats.md").read_text(), "Versions")
    rows = re.findall(r"^\| (.+?) \| (\d+) \| `cachekeeper/([\w/]+)\.py` `(\w+)` \|$", text, re.M)
    return [(name, int(v), "cachekeeper." + path.replace("/", "."), const) for name, v, path, const in rows]


def test_docs_formats_lists_the_versions_the_code_writes() -> None:
    rows = versions_table()
    assert len(rows) >= 12
    wrong = [f"{name}: docs say {v}, {mod}.{const} is {getattr(importlib.import_module(mod), const)}"
             for name, v, mod, const in rows if getattr(importlib.import_module(mod), const) != v]
    assert wrong == []
