"""The repo snapshots of a run with their reference checkers, one per repo root, kept between
runs in the Runtime's dream memo and, as a token cache, in the state dir."""

import contextlib
from pathlib import Path

from memoryd.dream.refs import RefChecker
from memoryd.dream.repo import RepoIndex, dump_sources, load_sources
from memoryd.runtime import DreamMemo, Runtime
from memoryd.storage.state import StateStore


class RepoCache:
    """One repo snapshot with its reference checker per repo root per run (not per dir).

    Snapshots outlive the run in `memo`: the next run rebuilds from the held one, reading only
    sources whose stat changed, and keeps the checker (and its checks) when nothing did. A
    process holding none starts from the token cache in `store`'s state dir.
    """

    def __init__(self, store: StateStore | None = None, memo: DreamMemo | None = None) -> None:
        self._built: dict[Path, RefChecker] = {}
        self._store = store
        self._memo = memo if memo is not None else DreamMemo()

    @classmethod
    def of(cls, rt: Runtime) -> "RepoCache":
        """The cache a command's run uses: the Runtime's memo and state dir."""
        return cls(rt.store, rt.dream)

    def checker(self, root: Path | None, *, save: bool = False) -> RefChecker:
        """`save`: write the token cache back when it changed (never for a dry run, which
        writes nothing at all)."""
        if root is None:
            return RefChecker(None)
        if root not in self._built:
            self._built[root] = _snapshot(self._memo, root, self._store, save=save)
        elif save:
            with self._memo.repo_lock:
                _snapshot_saved(self._memo, root, self._built[root], self._store)
        return self._built[root]


_HELD_ROOTS = 8  # repo snapshots kept between runs (the least recently used goes first)


def _snapshot(memo: DreamMemo, root: Path, store: StateStore | None, *, save: bool) -> RefChecker:
    with memo.repo_lock:
        held = memo.snapshots.pop(root, None)
        if not root.is_dir():
            return RefChecker(None)
        previous = held.repo.sources if held is not None and held.repo is not None else None
        if previous is None and store is not None:
            previous = load_sources(root, store.load_repo_tokens(root))
            if previous is not None:
                memo.on_disk[root] = previous
        repo = RepoIndex.build(root, previous=previous)
        if held is None or held.repo is None or not _same_tree(held.repo, repo):
            held = RefChecker(repo)
        elif held.repo.sources is not repo.sources:
            # The same tree, but sources read again (racy ones, say): keep the checks made,
            # and hand the new sources to the next build.
            held.repo = repo
        memo.snapshots[root] = held
        while len(memo.snapshots) > _HELD_ROOTS:
            gone = next(iter(memo.snapshots))
            del memo.snapshots[gone]
            memo.on_disk.pop(gone, None)
        if save:
            _snapshot_saved(memo, root, held, store)
        return held


def _same_tree(a: RepoIndex, b: RepoIndex) -> bool:
    """Whether every check made against ``a`` holds against ``b``: the same walk (signature)
    and tokens (sources read again, racy ones say, may have changed unseen)."""
    return a.signature == b.signature and (a.sources is b.sources or a.tokens == b.tokens)


def _snapshot_saved(
    memo: DreamMemo, root: Path, checker: RefChecker, store: StateStore | None
) -> None:
    """Write the token cache unless the state dir holds it (under the memo's repo lock)."""
    sources = checker.repo.sources if checker.repo is not None else None
    if store is None or sources is None or memo.on_disk.get(root) is sources:
        return
    with contextlib.suppress(OSError):  # a cache: no pass needs it
        store.save_repo_tokens(root, dump_sources(root, sources))
        memo.on_disk[root] = sources
