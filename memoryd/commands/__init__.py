"""One module per command: its arguments, the one use case it runs, its view; `memoryd.cli`
imports a command's module only when that command runs.
May import: claude, daemon, discipline, discover, dream, indexing, model, recall, storage,
trash, versions, views, and the flat modules.
"""
