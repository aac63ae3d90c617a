"""memoryd's own storage: the one SQLite state store (`statedb`), per-dir state, the
journal, the audit log, atomic file writes (`fsops`) and bounded parsing (`safejson`).
May import: discipline, discover, dream, indexing, model, recall, trash, and the flat modules.
"""
