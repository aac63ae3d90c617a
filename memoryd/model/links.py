"""`[[name]]` links between memories, and which of them name no memory of the dir (pure).

A link names a memory by its frontmatter `name` or its file name without `.md`, without case;
`[[name|label]]` and `[[name#heading]]` name `name`. A *dangling* link (no file of the dir
answers to it) is reported, never acted on: the memory holding it is the agent's text.
"""

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

# One line, no brackets inside, at most 200 bytes of name: linear on any input.
_LINK: Final = re.compile(rb"\[\[([^\[\]\n|#]{1,200})(?:[|#][^\[\]\n]{0,200})?\]\]")


def links_in(data: bytes) -> tuple[str, ...]:
    """The names a file's bytes link to as `[[name]]`, each once, in order of appearance."""
    if b"[[" not in data:
        return ()
    found = (m.group(1).decode("utf-8", "replace").strip() for m in _LINK.finditer(data))
    return tuple(dict.fromkeys(name for name in found if name))


def _key(name: str) -> str:
    return " ".join(name.casefold().removesuffix(".md").split())


@dataclass(frozen=True, slots=True)
class Dangling:
    file: str  # the memory holding the link
    link: str  # the name it links to, as written
    moved: str = ""  # the file this pass moves to the trash that answered to it, if one did

    @property
    def why(self) -> str:
        if self.moved:
            return f"{self.moved} is moved to the trash by this pass"
        return "no memory of this dir has that name or file name"

    def to_json(self) -> dict[str, str]:
        return {"file": self.file, "link": self.link, "why": self.why}


def dangling(
    links: Mapping[str, Sequence[str]],
    names: Mapping[str, str],
    others: Iterable[str] = (),
    moved: Iterable[str] = (),
) -> list[Dangling]:
    """The links (`links`: file -> names) of the memories that stay that no staying file
    answers to. `names`: file -> frontmatter name; `others`: the dir's other `*.md` files;
    `moved`: the memories the pass moves."""
    gone = set(moved)
    staying: set[str] = set()
    leaving: dict[str, str] = {}
    for file, name in names.items():
        for key in (_key(file), _key(name)):
            if file in gone:
                leaving.setdefault(key, file)
            else:
                staying.add(key)
    staying.update(_key(f) for f in others)
    out = []
    for file in sorted(links):
        if file in gone:
            continue
        for link in links[file]:
            key = _key(link)
            if key and key not in staying:
                out.append(Dangling(file, link, leaving.get(key, "")))
    return out
