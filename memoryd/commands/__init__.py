"""memoryd's commands: one module per command (its arguments, the one use case it calls, its
view), each imported only when its command runs. May import any of memoryd's modules; none of
them imports a command module except `memoryd.cli` (which dispatches to them)."""
