"""Git's conflict markers in a file: a merge left both sides in it, and nothing in it can be
taken as what a person meant (pure)."""

import re

# A conflicted hunk as git writes it: `<<<<<<< ours`, (`||||||| base`), `=======`, `>>>>>>>
# theirs`, each at the start of a line; all three, as one alone may be a quoted marker.
_START = re.compile(r"^<{7}(?: |$)", re.MULTILINE)
_MIDDLE = re.compile(r"^={7}\r?$", re.MULTILINE)
_END = re.compile(r"^>{7}(?: |$)", re.MULTILINE)

HINT = (
    "finish the merge: keep what each side should keep, delete the marker lines, then "
    "`git add` the file; memoryd leaves it alone until then"
)


def conflict_line(text: str) -> int | None:
    """The 1-based line of the first conflict hunk's `<<<<<<<` marker; None: no conflict."""
    if "<<<<<<<" not in text:  # the common case, without a regex pass
        return None
    start = _START.search(text)
    if start is None:
        return None
    middle = _MIDDLE.search(text, start.end())
    if middle is None or _END.search(text, middle.end()) is None:
        return None
    return text.count("\n", 0, start.start()) + 1


MARK = "holds git conflict markers"


def conflict_message(line: int) -> str:
    return f"{MARK} (<<<<<<< at line {line}), left by a merge"


def conflict_message_short() -> str:
    return f"{MARK}, left by a merge (kept, not considered)"
