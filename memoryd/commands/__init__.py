"""One module per command: its arguments, the one use case it runs, its view; `memoryd.cli`
imports a command's module only when that command runs. Beside them, the use cases that
join several layers: `forgetting` (`memoryd forget`, with its purge), `supersession` (what
`history` names and what superseded it), `resolve`, and `legacy` (the state files of older
versions, imported once: it needs every concern's tables).
May import: claude, daemon, discipline, discover, dream, indexing, model, recall, storage,
trash, versions, views, and the flat modules.
"""
