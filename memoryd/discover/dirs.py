"""Making memory dirs of folders: a repo's, the Claude home's, nested ones; a link that leads
out of where it was found is refused.
"""

from collections.abc import Iterator
from pathlib import Path

from memoryd.config import Config
from memoryd.discover.found import Found, MemoryDir, RefusedDir
from memoryd.discover.look import holds_no_folder, is_dir, resolved, subdirs
from memoryd.discover.transcripts import Transcripts
from memoryd.model.agentview import INDEX_NAME

NESTED_DEPTH = 4


def _opted_in(real: Path, config: Config) -> bool:
    """Is this folder named in paths.extra_memory_dirs (by itself or by a link to it)?"""
    return any(resolved(extra) == real for extra in config.paths.extra_memory_dirs)


def make(
    path: Path,
    kind: str,
    label: str,
    root: Path | None,
    reason: str,
    config: Config,
    within: Path | None = None,
) -> Found:
    """`within`: the resolved repo or Claude home a dir found there must stay in (a link out of
    it, to a notes vault say, is refused); None for a dir named in the config or by hand."""
    real = resolved(path)
    if within is not None and not real.is_relative_to(within) and not _opted_in(real, config):
        return RefusedDir(path, real, kind, label, within)
    override = config.override_for(path)
    if override.repo_root is not None:
        root, reason = override.repo_root, "set in the config"
    return MemoryDir(path, real, kind, label, root, reason, via_symlink=real != path.absolute())


def named_dir(
    path: Path, kind: str, label: str, root: Path | None, reason: str, config: Config
) -> MemoryDir:
    made = make(path, kind, label, root, reason, config)
    assert isinstance(made, MemoryDir)  # no boundary: never refused
    return made


def nested_dirs(parent: MemoryDir, config: Config) -> Iterator[MemoryDir]:
    """Subfolders holding their own MEMORY.md are memory dirs of their own."""
    stack = [(parent.real_path, 0)]
    while stack:
        folder, depth = stack.pop()
        if depth >= NESTED_DEPTH or holds_no_folder(folder):
            continue
        for sub in subdirs(folder):
            if sub.is_symlink():
                continue
            if (sub / INDEX_NAME).is_file():
                # Under a resolved folder and no symlink itself: never leaves its parent.
                yield named_dir(
                    sub, "nested", sub.name, parent.repo_root, parent.repo_reason, config
                )
            stack.append((sub, depth + 1))


def repo_dirs(repo: Path, config: Config) -> Iterator[Found]:
    """A repo's `.claude/` memory dirs; one that leads out of the repo comes as a RefusedDir."""
    claude = repo / ".claude"
    within = resolved(repo)
    memory = claude / "memory"
    if is_dir(memory):
        yield make(memory, "repo", repo.name, repo, "repo-scope memory", config, within)
    kinds = (("agent-memory", "repo-agent"), ("agent-memory-local", "repo-agent-local"))
    for folder, kind in kinds:
        if (claude / folder / INDEX_NAME).is_file():
            # Some repos keep one memory dir right at agent-memory/ (often a symlink to it).
            yield make(claude / folder, kind, repo.name, repo, "repo-scope memory", config, within)
            continue
        for agent in subdirs(claude / folder):
            yield make(agent, kind, agent.name, repo, "repo-scope memory", config, within)


def project_dirs(base: Path, config: Config, transcripts: Transcripts) -> Iterator[Found]:
    """`<base>/projects/<slug>/memory/` dirs (the Claude home's, or the base that
    CLAUDE_CODE_REMOTE_MEMORY_DIR names); one leading out of the base is refused."""
    within = resolved(base)
    for project in subdirs(base / "projects"):
        memory = project / "memory"
        if is_dir(memory):
            made = make(memory, "project", project.name, None, "", config, within)
            if isinstance(made, RefusedDir):
                yield made  # its transcripts are not read: they may be as far out as it is
                continue
            root, reason = transcripts.repo_root(project.name)
            yield make(memory, "project", project.name, root, reason, config, within)


def home_dirs(claude_home: Path, config: Config, transcripts: Transcripts) -> Iterator[Found]:
    """A Claude home's project and agent memory dirs; one leading out of it is refused."""
    yield from project_dirs(claude_home, config, transcripts)
    within = resolved(claude_home)
    for agent in subdirs(claude_home / "agent-memory"):
        yield make(agent, "agent", agent.name, None, "user-scope agent memory", config, within)
