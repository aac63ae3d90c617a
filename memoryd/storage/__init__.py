"""memoryd's own storage: the one SQLite state store (`statedb`), per-dir state, the
journal, the audit log, atomic file writes (`fsops`) and bounded parsing (`safejson`).
May import model, memoryd.errors, memoryd.paths, memoryd.logsetup and the stdlib.
"""
