"""memoryd's commands: one module per command (its arguments, the one use case it calls, its
view), imported by `memoryd.cli` only when that command runs. May import any of memoryd's
modules; outside it only `resolve` (names on the command line) and `service` are imported."""
