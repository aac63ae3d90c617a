"""The index against the agent's window: where a memory's pointer is seen (`explain`) and the
budget's use (`dirs`, `status`).
"""

from typing import Any

from memoryd.discover.found import MemoryDir
from memoryd.indexing.read import budget_of, read_index_file, view_kind
from memoryd.model.agentview import Hidden, ViewKind
from memoryd.model.index import (
    ARCHIVE_NAME,
    INDEX_NAME,
    LinkKind,
    local_links,
    measure_view,
    split_lines,
    view_of,
)
from memoryd.runtime import Runtime
from memoryd.storage import fsops


def agent_sees(rt: Runtime, md: MemoryDir, filename: str) -> str:
    """Where the agent finds a memory's pointer, or why it does not (for `explain`)."""
    budget = budget_of(rt.config.index)
    with fsops.open_dir(md.real_path) as dir_fd:
        main = read_index_file(dir_fd, INDEX_NAME, rt.versions)
        archive = read_index_file(dir_fd, ARCHIVE_NAME, rt.versions)
    text = main.text or ""
    view = view_of(text, budget, view_kind(md))
    seen: list[int] = []
    hidden: list[str] = []
    for number, line in enumerate(split_lines(text)):
        link = line.link
        if link is None or link.kind is not LinkKind.LOCAL or link.target != filename:
            continue
        why = view.hidden(number)
        if why is None:
            seen.append(number + 1)
        else:
            hidden.append(f"the pointer on MEMORY.md line {number + 1} is {why.value}")
    in_archive = archive.text is not None and filename in {
        link.target for link in local_links(archive.text)
    }
    if seen:
        found = f"loaded: its pointer on MEMORY.md line {seen[0]} is in what the agent loads"
    elif in_archive:
        found = "in MEMORY-ARCHIVE.md, which the agent reads when a topic is not listed"
    else:
        found = "not indexed for the agent"
    if hidden:
        found += "; " + "; ".join(hidden)
        if not seen and not in_archive:
            found += " (memoryd adds a visible pointer once it is past its grace)"
    return found


def budget_use(text: str | None, rt: Runtime, kind: ViewKind = ViewKind.AUTO) -> dict[str, Any]:
    """The index against the agent's window, measured on what the agent loads, and how many
    of its pointer lines the agent does not see, by why."""
    text = text or ""
    budget = budget_of(rt.config.index)
    view = view_of(text, budget, kind)
    m = measure_view(text, view)
    hidden: dict[str, int] = {}
    for number, line in enumerate(split_lines(text)):
        link = line.link
        if link is None or link.kind is not LinkKind.LOCAL:
            continue
        why: Hidden | None = view.hidden(number)
        if why is not None:
            hidden[why.value] = hidden.get(why.value, 0) + 1
    return {
        "lines": m.lines,
        "max_lines": rt.config.index.max_lines,
        "chars": m.chars,
        "max_chars": rt.config.index.max_chars,
        "bytes": m.bytes,
        "target_bytes": rt.config.index.target_bytes,
        "loaded_whole": view.fits(budget.max_lines, budget.max_chars),
        "hidden_pointers": hidden,
    }
