"""One dream pass over one memory dir: read and plan (dream.read), write (dream.write: the
journal, the moves, the index), report (dream.rows: the audit rows, the dir state)."""

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from memoryd.discover.found import MemoryDir
from memoryd.discover.locks import claude_lock
from memoryd.dream import acked, rows
from memoryd.dream.budget import PassBudget, PassStopped
from memoryd.dream.kinds import PassStatus
from memoryd.dream.read import IndexBeingWritten, Reading, read_and_plan
from memoryd.dream.refs import RefChecker
from memoryd.dream.repocache import RepoCache
from memoryd.dream.result import DreamResult
from memoryd.dream.write import INDEX_NOT_UPDATED, IndexNotWritten, apply, index_failure
from memoryd.errors import MemorydError
from memoryd.indexing.passes import index_after_dream
from memoryd.runtime import Runtime


def dream_dir(
    rt: Runtime,
    md: MemoryDir,
    *,
    repos: RepoCache,
    dry_run: bool = False,
    trigger: str = "command",
    before_move: Callable[[str], None] | None = None,
    budget: PassBudget | None = None,
) -> DreamResult:
    """One pass; every decision, including each not to act, is logged. A real pass holds the
    dir's writer lock throughout; one the daemon starts (`trigger` not "command") skips a dir
    another process has. `before_move`: see trash.Mover. Past `budget` (the config's by
    default) or asked to stop (SIGTERM), it stops before its first move: it fails, moving nothing.
    """
    one = _Pass(rt, md, repos, dry_run, trigger, before_move, budget or PassBudget.of(rt))
    if dry_run:
        return one.run()
    with rt.store.lock(md.real_path, wait=trigger == "command") as locked:
        if locked:
            return one.run()
    result = DreamResult(md, "-", PassStatus.SKIPPED)
    result.message = "another memoryd process is working on this dir"
    rt.audit.write("dream.skipped", dir=md.path, why=result.message)
    return result


def repo_note(md: MemoryDir, checker: RefChecker) -> str:
    """Why no reference of the dir can be checked, or "" when they can."""
    if md.repo_root is None:
        return f"no repo root ({md.repo_reason}): every reference is unverifiable"
    if checker.repo is None:
        return f"repo root {md.repo_root} is missing: every reference is unverifiable"
    return ""


@dataclass(slots=True)
class _Pass:
    rt: Runtime
    md: MemoryDir
    repos: RepoCache
    dry_run: bool
    trigger: str
    before_move: Callable[[str], None] | None
    budget: PassBudget
    result: DreamResult = field(init=False)

    def run(self) -> DreamResult:
        rt, md = self.rt, self.md
        started = time.monotonic()
        pass_id = datetime.now().strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(3)
        result = self.result = DreamResult(md, pass_id, PassStatus.COMPLETED)
        now = rt.clock()
        lock = claude_lock(md, now)
        if lock is not None and lock.held:
            return self._skipped(f"{lock.why}: Claude Code is consolidating this dir itself")
        if not self.dry_run:
            rows.started(rt, md, result.pass_id, self.trigger)
        try:
            try:
                reading = read_and_plan(
                    rt, md, self.repos, save=not self.dry_run, budget=self.budget
                )
            except IndexBeingWritten as busy:
                # MEMORY.md is blank while a program writes it: what it will hold decides
                # whether this pass may move anything. Next time.
                result.repo_note = repo_note(md, self.repos.checker(md.repo_root))
                return self._skipped(str(busy))
            self._act(reading)
        except (MemorydError, OSError) as error:
            result.status, result.message = PassStatus.FAILED, str(error)
            result.duration_ms = int((time.monotonic() - started) * 1000)
            if not self.dry_run:
                counted = isinstance(error, PassStopped) and bool(error.budget)
                rows.failed(rt, result, now, counted=counted)
            return result
        result.duration_ms = int((time.monotonic() - started) * 1000)
        if not self.dry_run:
            rows.completed(rt, result, self.trigger, now)
        return result

    def _skipped(self, why: str) -> DreamResult:
        self.result.status, self.result.message = PassStatus.SKIPPED, why
        if not self.dry_run:
            self.rt.audit.write("dream.skipped", dir=self.md.path, why=why)
        return self.result

    def _act(self, reading: Reading) -> None:
        """Report the plan, then make its moves (a managed dir, the breaker not tripped)."""
        rt, md, result, plan = self.rt, self.md, self.result, reading.plan
        result.repo_note = repo_note(md, reading.checker)
        result.probed_index, result.merge_conflicts = reading.probed_index, reading.merge_conflicts
        inv = reading.inv
        result.files, result.secrets, result.plan = len(inv.items), inv.secrets, plan
        result.unparseable, result.conflicts = inv.unparseable, inv.conflicts
        result.acknowledged = acked.acknowledged(acked.load(rt.store, md.real_path), plan)
        if not reading.managed:
            result.status = PassStatus.UNMANAGED
            result.message = reading.why_unmanaged + "; the pass reports and moves nothing"
        elif plan.refused:
            result.status, result.message = PassStatus.REFUSED, plan.refused
        elif self.dry_run:
            result.status = PassStatus.DRY_RUN
        if not self.dry_run:
            # Loaded and saved once, not per row (a save per row was most of a 10,000 pass).
            said = rt.store.load(md.real_path)
            rows.said_of_plan(rt, result, reading, said)
            rt.store.save(md.real_path, said)
            self._write(reading)
        moved = (
            [m.filename for m in plan.moves]
            if result.status is PassStatus.DRY_RUN
            else [r.original_name for r in result.moved]
        )
        result.dangling = inv.dangling(moved)
        if result.index is not None and result.index.status in INDEX_NOT_UPDATED:
            raise IndexNotWritten(index_failure(md, result))

    def _write(self, reading: Reading) -> None:
        """The moves and the index update of a pass that is no dry run."""
        if not reading.managed:
            return
        # The daemon leaves a just-written file its grace for the agent's own pointer.
        grace = 0.0 if self.trigger == "command" else self.rt.config.index.new_file_grace
        if reading.plan.moves and not reading.plan.refused:
            self.budget.check("the first move")
            apply(self.rt, self.result, reading.basis, grace, self.before_move)
        else:
            self.result.index = index_after_dream(
                self.rt, self.md, frozenset(), reading.basis, grace=grace
            )
