"""One module per command: its arguments, the one use case it runs, its view; `memoryd.cli`
imports a command's module only when that command runs.
May import every folder but daemon internals (`run` starts the daemon's loop).
"""
