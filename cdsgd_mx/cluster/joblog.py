"""What went wrong in a failed job, from the launcher's interleaved output.

cdsgd_mx.launch prefixes each node's lines with its label ("worker 1 | ...") and says why it
stopped the job ("launch | worker 1 exited with code 2; stopping the job"). A failed job's
output is mostly noise (tracebacks from every node, retries, the other nodes being stopped):
`failure` picks the node that failed first and its last meaningful lines.
"""
import re

LABEL = re.compile(r"^(scheduler|server \d+|worker \d+) \| ?(.*)$")
CULPRIT = re.compile(r"\b(scheduler|server \d+|worker \d+)\b")
NOISE = re.compile(r"^(Traceback \(most recent call last\)|During handling of the above exception"
                   r"|The above exception was the direct cause|WARNING: Retrying|download failed due to"
                   r"|\s)")


def failure(lines, keep=5):
    """(cause, node, its last `keep` meaningful lines) of a failed job's output lines: cause is
    the launcher's first reason for stopping the job (or None), node the label it names."""
    cause = next((ln.split("|", 1)[1].strip() for ln in lines if ln.startswith("launch |")
                  and ("stopping the job" in ln or "exited with" in ln or "stall" in ln)), None)
    named = CULPRIT.search(cause) if cause else None
    node = named.group(1) if named else None
    said = []
    for ln in lines:
        m = LABEL.match(ln)
        if not m or (node and m.group(1) != node):
            continue
        text = m.group(2).rstrip()
        if text and not NOISE.match(text) and (not said or said[-1] != text):
            said.append(text)
    return cause, node, said[-keep:]


def hint(said):
    """One sentence saying what to try, from what the failing node said."""
    text = "\n".join(said)
    if "not found (looked in" in text or "data error" in text:
        return "The data is missing: run the command the message names, then run this again."
    if "stall" in text or "waited" in text:
        return ("A node stopped making progress: run again with --bandwidth none to take the emulated link "
                "out of the picture; docs/failures.md says what each stop means.")
    return ("Run again with --bandwidth none to take the emulated link out of the picture; if it still fails, "
            "the full log named above holds every node's output (docs/failures.md explains the launcher's messages).")
