"""The docs say what is there: every link to a heading of a doc finds it, docs/design.md's
module table has one row per file of the package, no more, and every message
docs/troubleshooting.md quotes is still made by the code (issue 37, point 5)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PACKAGE = ROOT / "mixshard"
TEXTS = {ROOT / "README.md": (ROOT / "README.md").read_text()} | {
    p: p.read_text() for p in sorted(DOCS.glob("*.md"))
}
FENCE = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)
# [text](target.md#anchor) or [text](#anchor): the file part may be a path
LINK = re.compile(r"\]\(((?:[\w./-]*\.md)?)#([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but `-` and `_` dropped, each
    space a hyphen (markdown's own characters, such as backticks, are punctuation too)."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of a document's headings (a repeated one gets -1, -2, ... as on GitHub)."""
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", FENCE.sub("", text), re.MULTILINE):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def test_slugs_are_githubs():
    assert slug("One torch thread or two: `python scripts/bench_threads.py PACK quiet|busy`") == (
        "one-torch-thread-or-two-python-scriptsbench_threadspy-pack-quietbusy"
    )
    assert slug("Reading from disk, cold and warm") == "reading-from-disk-cold-and-warm"
    assert anchors("# A\n## B\n```\n# not a heading\n```\n## B\n") == {"a", "b", "b-1"}


def test_every_link_to_a_heading_finds_it():
    """Every `X.md#anchor` (and in-page `#anchor`) link of the README and docs/*.md, among
    them every `benchmarks.md#...`, names a heading of its target."""
    broken, checked = [], 0
    for path, text in TEXTS.items():
        for target, anchor in LINK.findall(FENCE.sub("", text)):
            file = (path.parent / target).resolve() if target else path
            assert file.exists(), f"{path.name} links to {target}, which does not exist"
            checked += 1
            if anchor not in anchors(file.read_text()):
                broken.append(f"{path.relative_to(ROOT)}: {target}#{anchor}")
    assert checked >= 5  # the README's and docs' links to benchmarks.md among them
    assert not broken, "links to no heading (fix the link or the heading): " + ", ".join(broken)


def modules() -> set[str]:
    """Every module of the package: its `.py` and `.c` files, relative to `mixshard/`."""
    files = [*PACKAGE.rglob("*.py"), *PACKAGE.rglob("*.c")]
    return {p.relative_to(PACKAGE).as_posix() for p in files if "__pycache__" not in p.parts}


def table_rows() -> list[str]:
    """The first cells of docs/design.md's module table: the rows, in the "Module layout"
    section, whose first cell is one path in backticks (`reading/local.py`)."""
    text = (DOCS / "design.md").read_text()
    start = text.index("\n## Module layout")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end >= 0 else len(text)]
    return re.findall(r"^\|\s*`([^`|]+\.(?:py|c))`\s*\|", section, re.MULTILINE)


def test_the_module_table_has_a_row_for_each_module():
    rows = table_rows()
    assert len(rows) > 50  # the table was found and parsed
    twice = sorted({r for r in rows if rows.count(r) > 1})
    missing = sorted(modules() - set(rows))
    stale = sorted(set(rows) - modules())
    problems = []
    if missing:
        problems.append("add rows (`path` | what it does) for: " + ", ".join(missing))
    if stale:
        problems.append("remove the rows of files that are gone: " + ", ".join(stale))
    if twice:
        problems.append("keep one row each of: " + ", ".join(twice))
    assert not problems, "docs/design.md's module table: " + "; ".join(problems)


def test_the_benchmarks_no_longer_say_shards_are_never_mapped():
    """docs/benchmarks.md once said shards are "never memory-mapped", a page before it
    described the mapped reads."""
    assert "never memory-mapped" not in (DOCS / "benchmarks.md").read_text()


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9_]+", text.lower())


def _code_words() -> str:
    """The package's, the scripts' and the Makefile's text as one line of lower-case words,
    string pieces joined, each f-string field (and make variable) a word `gap`, an argument a
    message names (`Arg("shard_size", n)`) as its words (`shard size`)."""
    files = [*PACKAGE.rglob("*.py"), *PACKAGE.rglob("*.c"), *(ROOT / "scripts").glob("*.py")]
    text = "\n".join(p.read_text() for p in [*files, ROOT / "Makefile"])
    text = re.sub(r'Arg\("(\w+)"(?:, [^()]*)?\)', lambda m: m[1].replace("_", " "), text)
    text = re.sub(r"[\"']\s*\n\s*(?:\+\s*)?[rbf]*[\"']", "", text)  # "a " "b" -> "a b"
    text = re.sub(r"\{[^{}\n]*\}|\$\([A-Z_]+\)|%[sd]", " gap ", text)
    return " " + " ".join(_words(text)) + " "


def _in_code(message: str, code: str) -> bool | None:
    """Whether some three words in a row of `message` (its placeholders, `SRC`, `N`, `...`,
    left out) are in `code`, one of them possibly a field there when the other two are not
    short words; None: too short to tell."""
    words = _words(re.sub(r"\b[A-Z][A-Z0-9_]*\b|\.\.\.", " gap ", message))
    runs = [
        words[i : i + 3]
        for i in range(len(words) - 2)
        if "gap" not in words[i : i + 3] and len("".join(words[i : i + 3])) >= 10
    ]
    if not runs:
        return None
    return any(
        f" {' '.join('gap' if k == j else run[k] for k in range(3))} " in code
        for run in runs
        for j in (-1, 0, 1, 2)
        if j < 0 or len("".join(run)) - len(run[j]) >= 8
    )


def test_every_troubleshooting_message_is_still_made():
    """Each message quoted in the first column of docs/troubleshooting.md's tables is still in
    the code (click's own usage wording, `Invalid value for ...`, is click's)."""
    code = _code_words()
    assert _in_code("the frobnicator of PACK ran out of coffee", code) is False
    assert _in_code("source archive not found: ARCHIVE", code)  # `source {what} not found`
    text = (DOCS / "troubleshooting.md").read_text()
    gone = []
    for row in re.findall(r"^\| (.+?) \| ", text, re.MULTILINE):
        for message in re.findall(r"`([^`]+)`", row):
            if not message.startswith("Invalid value for") and _in_code(message, code) is False:
                gone.append(message)
    assert not gone, "docs/troubleshooting.md quotes messages no code makes: " + "; ".join(gone)
