"""Text for a person's terminal: names and paths as they are, unless they would act on it.

`shown` is the one escaping step for everything memoryd prints to a terminal that it did not
write itself (a name, a path, a memory's text, a record store's line): what a terminal would
act on (an escape sequence, a lone carriage return, a bidi control, a newline inside a name)
is written out as an escape. `--json` output is JSON, whose encoder escapes control
characters itself.
"""


def shown(text: object, *, lines: bool = False) -> str:
    """A name or path as a terminal should get it: control characters (a newline in a file
    name, an escape sequence in a folder's name) written as escapes, never acted on.

    `lines`: text of many lines (a memory's body, a diff): its newlines and tabs stay, and so
    does a carriage return just before a newline (a CRLF file); every other is escaped."""
    value = str(text)
    if value.isprintable():
        return value
    if lines:
        *whole, last = value.split("\n")
        return "\n".join([*(_line(line, crlf=True) for line in whole), _line(last, crlf=False)])
    return "".join(c if c.isprintable() else _escaped(c) for c in value)


def _line(line: str, *, crlf: bool) -> str:
    """One line of many; `crlf`: a newline follows it, so a carriage return ending it stays."""
    body, end = (line[:-1], "\r") if crlf and line.endswith("\r") else (line, "")
    return "".join(c if c.isprintable() or c == "\t" else _escaped(c) for c in body) + end


def _escaped(char: str) -> str:
    return char.encode("unicode_escape").decode("ascii")
