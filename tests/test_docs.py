"""The docs a user reads (issue 56): every command they show answers --help, and every
relative link leads somewhere. Read from README.md and docs/*.md, so it stays true as pages
change."""
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
COMMAND = re.compile(r"python -m (cdsgd_mx[\w.]*)|python (scripts/[\w]+\.py)")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def commands():
    """{(kind, target)}: every distinct `python -m cdsgd_mx...` module and `python scripts/X.py`."""
    found = set()
    for page in PAGES:
        for module, script in COMMAND.findall(page.read_text()):
            found.add(("-m", module.rstrip(".")) if module else ("script", script))
    return sorted(found)


def test_the_pages_show_commands():
    assert ("-m", "cdsgd_mx.launch") in commands() and ("script", "scripts/reproduce.py") in commands()


def test_every_command_in_the_docs_answers_help():
    """All at once (each starts Python, some import MXNet): a command a page shows that no longer
    exists, or that cannot say how it is used, fails here."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DMLC_", "CDSGD_"))}
    procs = {}
    for kind, target in commands():
        argv = [sys.executable, "-m", target] if kind == "-m" else [sys.executable, target]
        procs[target] = subprocess.Popen(argv + ["--help"], cwd=str(ROOT), env=env, stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, text=True)
    failed = []
    for target, proc in procs.items():
        out, _ = proc.communicate(timeout=180)
        if proc.returncode != 0 or "usage" not in out.lower():
            failed.append("%s: exit %s: %s" % (target, proc.returncode, out.strip()[-300:]))
    assert not failed, "\n".join(failed)


def test_every_relative_link_resolves():
    broken, checked = [], 0
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue  # a web address or an anchor of the page itself
            checked += 1
            path = (page.parent / target.split("#")[0]).resolve()
            if not path.exists():
                broken.append("%s: %s" % (page.relative_to(ROOT), target))
    assert not broken, "links to nothing: %s" % broken
    assert checked > 5, "the link reader found almost no links: %d" % checked


# A figure table: one whose cells hold a measurement (a time, a rate, a ratio, a spread). On the
# figure pages every table with a digit counts. Either way the text from the heading above it to
# its last row names the commit the figures come from ("commit 1e298c9").
MEASURED = re.compile(r"\d ?ms\b|\d(\.\d+)? ?s\b|GB/s|\dx\b|±|\d\.\d+ ?%|\d\.\d+ pp")
COMMIT = re.compile(r"\bcommits? `?[0-9a-f]{7,40}\b")
FIGURE_PAGES = ("performance.md", "reproduction.md", "performance-history.md", "reproduction-history.md")


def tables(text):
    """(heading line index, first row index, end index, lines) of each markdown table."""
    lines, found, heading, i = text.splitlines(), [], 0, 0
    while i < len(lines):
        if lines[i].startswith("#"):
            heading = i
        if lines[i].startswith("|"):
            end = i
            while end < len(lines) and lines[end].startswith("|"):
                end += 1
            found.append((heading, i, end, lines))
            i = end
            continue
        i += 1
    return found


def is_figure_table(page, rows):
    if page.name in FIGURE_PAGES:
        return re.search(r"\d", rows) is not None
    return MEASURED.search(rows) is not None


def test_every_figure_table_names_a_commit():
    missing, counted = [], 0
    for page in PAGES:
        for heading, first, end, lines in tables(page.read_text()):
            if not is_figure_table(page, "\n".join(lines[first:end])):
                continue
            counted += 1
            if not COMMIT.search("\n".join(lines[heading:end])):
                missing.append("%s:%d (under %r)" % (page.relative_to(ROOT), first + 1, lines[heading][:60]))
    assert not missing, "figure tables naming no commit: %s" % missing
    assert counted > 10, "the table reader found almost no figure tables: %d" % counted


def test_the_table_reader_tells_figures_from_other_tables():
    page = ROOT / "docs" / "usage.md"
    text = "# A\n\n| x | y |\n|---|---|\n| a | 1 |\n\n## B\n\nat commit `abcdef1`\n\n| t |\n|---|\n| 3.5 ms |\n\n| u |\n|---|\n| 2x |\n"
    found = [(h, f) for h, f, e, lines in tables(text) if is_figure_table(page, "\n".join(lines[f:e]))]
    assert [f for _, f in found] == [10, 14]
    lines = text.splitlines()
    assert COMMIT.search("\n".join(lines[found[0][0]:found[0][1] + 3]))


def slug(heading):
    """GitHub's anchor of a heading: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lstrip("#").strip().lower())
    return text.replace(" ", "-")


def test_slugs_follow_githubs_rule():
    assert slug("## What 'bit for bit' covers, per door") == "what-bit-for-bit-covers-per-door"
    assert slug("### 2 bits both ways (`pull_compression='2bit'`)") == "2-bits-both-ways-pull_compression2bit"


def test_every_link_to_a_section_finds_its_heading():
    broken, checked = [], 0
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if re.match(r"^[a-z]+:", target) or "#" not in target:
                continue
            path, anchor = target.split("#", 1)
            doc = (page.parent / path).resolve() if path else page
            if doc.suffix != ".md" or not doc.exists():
                continue
            checked += 1
            if anchor not in {slug(l) for l in doc.read_text().splitlines() if l.startswith("#")}:
                broken.append("%s: %s" % (page.relative_to(ROOT), target))
    assert not broken, "links to no heading: %s" % broken
