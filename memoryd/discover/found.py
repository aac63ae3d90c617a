"""What discovery finds: memory dirs, links it refuses to follow, repos with none yet."""

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True, slots=True)
class MemoryDir:
    path: Path  # where it was found (may pass through a symlink)
    real_path: Path  # the resolved folder all I/O goes to
    kind: str  # project | agent | repo | repo-agent | repo-agent-local | extra | explicit | nested
    label: str  # the agent name, project slug or folder name
    repo_root: Path | None
    repo_reason: str  # how the repo root was found, or why there is none
    via_symlink: bool = False
    # Why Claude Code loads none of it (auto memory off, kept elsewhere); "": it does, or unknown.
    not_loaded: str = ""

    @property
    def heading(self) -> str:
        """The `# <name> Memory` title of a new MEMORY.md, on one line (a folder's name may
        hold a line break, which would put lines of its own into the index)."""
        agent = self.kind in ("agent", "repo-agent", "repo-agent-local")
        name = self.label if agent or self.repo_root is None else self.repo_root.name
        return " ".join(name.splitlines()) if "\n" in name or "\r" in name else name


@dataclass(frozen=True, slots=True)
class RefusedDir:
    """A memory dir whose link leads out of the repo or Claude home it was found in: left alone."""

    path: Path  # where it was found (the link, or a folder under one)
    target: Path  # where it leads, fully resolved
    kind: str
    label: str
    within: Path  # the repo or Claude home (resolved) it had to stay in
    source: str = ""  # the checked-in setting that names it, when no link does

    @property
    def scope(self) -> str:
        return "repo" if self.kind.startswith("repo") or self.source else "Claude home"

    @property
    def reason(self) -> str:
        if self.source:
            return (
                f"{self.source} names {self.target}, outside the repo {self.within} and the "
                "Claude home (a checked-in setting is followed only inside them)"
            )
        return f"its link leads to {self.target}, outside the {self.scope} {self.within}"

    @property
    def hint(self) -> str:
        return (
            f"to let memoryd maintain it, name {self.target} in paths.extra_memory_dirs "
            "(or name it on the command line)"
        )


Found = MemoryDir | RefusedDir


@dataclass(frozen=True, slots=True)
class EmptyRepo:
    """A repo named on the command line that has no memory dir at all (yet)."""

    path: Path
    looked_in: list[str]

    @property
    def message(self) -> str:
        return (
            f"{self.path}: a repo with no memory dirs yet (looked for "
            f"{', '.join(self.looked_in)}); nothing to do"
        )


@dataclass(frozen=True, slots=True)
class Discovery:
    dirs: list[MemoryDir]
    refused: list[RefusedDir]
    empty_repos: list[EmptyRepo] = field(default_factory=list)
    auto_memory_off: str = ""  # what turned Claude Code's auto memory off everywhere, if anything
    warnings: list[str] = field(default_factory=list)  # settings files that could not be used
