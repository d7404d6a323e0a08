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
