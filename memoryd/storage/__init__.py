"""memoryd's own storage: the one SQLite state store and the plumbing that writes files.

Holds only storage mechanics (opening, schemas, transactions, atomic file writes); no rule
about memories. May import `memoryd.errors`, `memoryd.paths`, `memoryd.logsetup` and the stdlib.
"""
