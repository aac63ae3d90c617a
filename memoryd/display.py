"""Text for a person's terminal: names and paths as they are, unless they would act on it."""


def shown(text: object) -> str:
    """A name or path as a terminal should get it: control characters (a newline in a file
    name, an escape sequence in a folder's name) written as escapes, never acted on."""
    value = str(text)
    if value.isprintable():
        return value
    return "".join(c if c.isprintable() else _escaped(c) for c in value)


def _escaped(char: str) -> str:
    return char.encode("unicode_escape").decode("ascii")
