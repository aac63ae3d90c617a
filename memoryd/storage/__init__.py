"""memoryd's own storage: the one SQLite state store (`statedb`), per-dir state, the
audit log and atomic file writes (`fsops`, refusing a file a program holds open for writing:
`openfiles`).
May import: model, and the flat modules.
"""
