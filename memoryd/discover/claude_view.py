"""How Claude Code finds auto memory on this machine (environment, settings, transcripts), and
the auto-memory dirs of a repo.
"""

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from memoryd.config import COWORK_OVERRIDE, REMOTE_MEMORY_DIR, Config
from memoryd.discover.claude_env import (
    Settings,
    Switch,
    auto_memory_switch,
    project_settings,
    setting_dir,
    user_settings,
)
from memoryd.discover.cwd_cache import CwdCache
from memoryd.discover.dirs import make, named_dir, project_dirs
from memoryd.discover.found import Found, MemoryDir, RefusedDir
from memoryd.discover.look import (
    canonical_root,
    git_common_root,
    git_root,
    is_dir,
    no_claude,
    resolved,
)
from memoryd.discover.slugs import slugify
from memoryd.discover.transcripts import Session, Transcripts


@dataclass(frozen=True, slots=True)
class Plan:
    """Where Claude Code keeps a session's auto memory, and whether it loads it."""

    dir: Path
    source: str  # the variable or setting that put it there; empty for the default place
    switch: Switch
    checked_in: bool = False  # named by a project's checked-in `.claude/settings.json`


class ClaudeView:
    """How Claude Code finds auto memory on this machine, for one discovery: the transcripts,
    the environment and the settings files, each read once.

    Precedence as the client has it: CLAUDE_COWORK_MEMORY_PATH_OVERRIDE, else the first
    settings layer (`project_settings`, then the user's) setting `autoMemoryDirectory` (an
    unusable value means the default place), else `<base>/projects/<slug of the canonical
    git root>/memory/`, the base being CLAUDE_CODE_REMOTE_MEMORY_DIR or the Claude home."""

    def __init__(
        self, config: Config, claude_home: Path | None = None, cache: CwdCache | None = None
    ) -> None:
        self.config = config
        self.env = config.claude_env
        self.home = claude_home if claude_home is not None else config.paths.claude_home
        self.transcripts = Transcripts(self.home / "projects", cache)
        self.warnings: list[str] = []
        self.user = user_settings(self.home, self.warnings)
        self._settings: dict[tuple[Path, Path], tuple[Settings | None, ...]] = {}
        self._plans: list[tuple[Session, Plan]] | None = None
        self._loads: dict[Path, list[tuple[Session, Plan]]] | None = None

    @property
    def base(self) -> Path:
        return self.env.remote_memory_dir or self.home

    @property
    def cache(self) -> CwdCache:
        return self.transcripts.cache

    def _project_settings(self, cwd: Path, root: Path) -> tuple[Settings | None, ...]:
        key = (resolved(cwd), resolved(root))
        if key not in self._settings:
            if no_claude(cwd) and no_claude(root):
                self._settings[key] = (None, None, None)  # no settings file to read
            else:
                self._settings[key] = project_settings(cwd, root, self.warnings)
        return self._settings[key]

    def switch(self) -> Switch:
        """Auto memory on or off where no project says otherwise."""
        return auto_memory_switch(self.env, [self.user])

    def plan(self, cwd: Path, root: Path) -> Plan:
        """The auto-memory dir of a session started in `cwd` (canonical git root `root`)."""
        root_local, local, project = (
            self._project_settings(cwd, root) if is_dir(cwd) else (None, None, None)
        )
        switch = auto_memory_switch(self.env, [root_local, local, project, self.user])
        if self.env.cowork_override is not None:
            return Plan(
                self.env.cowork_override, f"{COWORK_OVERRIDE} in memoryd's environment", switch
            )
        layers = ((root_local, False), (local, False), (project, True), (self.user, False))
        for layer, checked_in in layers:
            if layer is None or layer.directory is None:
                continue
            where = setting_dir(layer.directory, self.env.home)
            if where is not None:
                return Plan(where, f"autoMemoryDirectory in {layer.path}", switch, checked_in)
            break  # the client takes the first value set, and falls back to the default
        return Plan(self.base / "projects" / slugify(str(root)) / "memory", "", switch)

    def plans(self) -> list[tuple[Session, Plan]]:
        """Each session the transcripts know whose folder still exists, with its plan."""
        if self._plans is None:
            self._plans = []
            for session in self.transcripts.sessions():
                if is_dir(session.cwd):
                    self._plans.append((session, self.plan(session.cwd, session.root)))
        return self._plans

    def loads(self) -> dict[Path, list[tuple[Session, Plan]]]:
        """The sessions (with their plans) by the resolved dir each loads."""
        if self._loads is None:
            self._loads = {}
            for session, plan in self.plans():
                self._loads.setdefault(resolved(plan.dir), []).append((session, plan))
        return self._loads

    def everywhere(self) -> tuple[Path, str] | None:
        """The one auto-memory dir the environment or the user's settings give every project."""
        if self.env.cowork_override is not None:
            return self.env.cowork_override, f"{COWORK_OVERRIDE} in memoryd's environment"
        if self.user is not None and self.user.directory is not None:
            where = setting_dir(self.user.directory, self.env.home)
            if where is not None:
                return where, f"autoMemoryDirectory in {self.user.path}"
        return None

    def shared_dir(self, path: Path, source: str) -> MemoryDir:
        """The one auto-memory dir `source` gives every project, at `path`."""
        reason = f"one auto-memory dir for every project ({source})"
        return named_dir(path, "project", path.name, None, reason, self.config)

    def relocated(self) -> Iterator[Found]:
        """The auto-memory dirs the environment and settings put somewhere else than
        `<claude_home>/projects/<slug>/memory/`, where they exist."""
        if self.env.remote_memory_dir is not None:
            yield from project_dirs(self.env.remote_memory_dir, self.config, self.transcripts)
        shared = self.everywhere()
        if shared is not None and is_dir(shared[0]):
            yield self.shared_dir(shared[0], shared[1])
        for session, plan in self.plans():
            if not plan.source or plan.source == (shared or (None, ""))[1]:
                continue
            if not is_dir(plan.dir):
                continue
            yield self._relocated_dir(plan, session.root, session.top)

    def _relocated_dir(self, plan: Plan, root: Path, top: Path) -> Found:
        """A project's relocated auto-memory dir; refused when its checked-in settings name
        it outside the repo (`top`, `root`) and the Claude home, as a link out would be."""
        reason = (
            f"the project whose {plan.source.removeprefix('autoMemoryDirectory in ')} "
            "puts its auto memory here"
        )
        within = None
        real = resolved(plan.dir)
        if plan.checked_in and not any(
            real.is_relative_to(resolved(inside)) for inside in (self.home, top, root)
        ):
            within = resolved(top)
        made = make(plan.dir, "project", plan.dir.name, root, reason, self.config, within)
        if isinstance(made, RefusedDir):
            return replace(made, source=plan.source)
        return made

    def for_repo(self, repo: Path) -> Iterator[Found]:
        """A repo's relocated auto-memory dir, for a repo named on the command line."""
        plan = self.plan(repo, canonical_root(repo))
        if plan.source and is_dir(plan.dir):
            if plan.source == (self.everywhere() or (None, ""))[1]:
                yield self.shared_dir(plan.dir, plan.source)
            else:
                yield self._relocated_dir(plan, canonical_root(repo), git_root(repo) or repo)

    def known_repos(self) -> list[Path]:
        """The folders sessions ran in and their git roots, that exist, once each by real
        path; not the Claude home's parent (its `.claude/` is the Claude home)."""
        home_claude = resolved(self.home)
        roots: dict[Path, Path] = {}
        for session in self.transcripts.sessions():
            # (A cwd gone is its own top and root: all three are skipped.)
            for root in dict.fromkeys((session.cwd, session.top, session.root)):
                if not is_dir(root):
                    continue
                real = resolved(root)
                if real in roots or resolved(root / ".claude") == home_claude:
                    continue
                roots[real] = root
        return [roots[real] for real in sorted(roots)]

    def not_loaded(self, md: MemoryDir) -> str:
        """Why Claude Code loads no session's auto memory from this dir, or "" (it does, or
        memoryd cannot tell)."""
        if md.kind != "project":
            return ""
        mine = self.loads().get(md.real_path, [])
        if any(plan.switch.on for _, plan in mine):
            return ""
        if mine:
            session, plan = mine[0]
            return f"auto memory is off for {session.cwd} ({plan.switch.source})"
        switch = self.switch()
        if not switch.on:
            return f"auto memory is off ({switch.source})"
        at_default = md.path.name == "memory" and md.path.parent.parent.name == "projects"
        if not at_default:
            return ""
        remote = self.env.remote_memory_dir
        base = f"{REMOTE_MEMORY_DIR} in memoryd's environment"
        for session, plan in self.plans():
            if slugify(str(session.root)) == md.label:
                return (
                    f"Claude Code keeps the auto memory of {session.cwd} in {plan.dir} "
                    f"instead ({plan.source or base})"
                )
            if session.folder == md.label and not plan.source:
                # A session in a subfolder or a worktree: keyed by its repo's git root.
                return (
                    f"Claude Code keeps the auto memory of {session.cwd} in {plan.dir}, "
                    f"the dir of its git root {session.root}"
                )
        shared = self.everywhere()
        if shared is not None:
            return f"Claude Code keeps auto memory in {shared[0]} instead ({shared[1]})"
        if remote is not None and not md.real_path.is_relative_to(resolved(remote)):
            return f"Claude Code keeps auto memory under {remote}/projects/ instead ({base})"
        return ""


def auto_memory_dirs(repo: Path, config: Config, view: ClaudeView) -> Iterator[Found]:
    """A repo's auto-memory dirs that exist: `<base>/projects/<slug>/memory/` for the slugs of
    the repo and of its canonical git root, under each base; and where it is relocated to."""
    roots = [repo]
    main = git_common_root(repo)
    if main is not None and main != repo:
        roots.append(main)
    bases = [view.home]
    if view.env.remote_memory_dir is not None:
        bases.append(view.env.remote_memory_dir)
    for base in bases:
        within = resolved(base)
        for root in roots:
            slug = slugify(str(root))
            memory = base / "projects" / slug / "memory"
            if not is_dir(memory):
                continue
            made = make(memory, "project", slug, None, "", config, within)
            if isinstance(made, RefusedDir):
                yield made
                continue
            found, reason = view.transcripts.repo_root(slug)
            if found is None:
                found, reason = root, f"the repo its slug names ({reason})"
            yield make(memory, "project", slug, found, reason, config, within)
    yield from view.for_repo(repo)
