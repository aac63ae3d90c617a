"""`shown`: the one escaping step for everything memoryd prints to a terminal that it did not
write itself. What a terminal would act on (an escape sequence, a lone carriage return, a bidi
control, a newline in a name) is written out as an escape; `--json` output escapes its own.
"""


def shown(text: object, *, lines: bool = False) -> str:
    """`text` with its control characters written as escapes. `lines`: text of many lines (a
    body, a diff), whose newlines, tabs and CRLF endings stay."""
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
