"""Regular expressions compiled at their first use, not at import: a pattern a command never
uses costs it nothing at start-up (agentview's block patterns took ~5 ms of every index)."""

import re
from typing import Any, cast


class _LazyPattern:
    """Stands for `re.compile(pattern, flags)`; each attribute is fetched once, then kept."""

    def __init__(self, pattern: str, flags: int) -> None:
        self._source = pattern
        self._flags = flags

    def __getattr__(self, name: str) -> Any:
        value = getattr(re.compile(self._source, self._flags), name)
        setattr(self, name, value)
        return value


def lazy(pattern: str, flags: int = 0) -> "re.Pattern[str]":
    return cast("re.Pattern[str]", _LazyPattern(pattern, flags))
