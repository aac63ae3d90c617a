"""Pure values in, values out: memory files, the index grammar and its edits, links, what a
scan keeps of a file (`scanned`), secrets flagged and masked (`secrets.mask`, the one masking
step), the one escaping step for the terminal (`display`), `humanize`, `sealed` bytes, the
only JSON and TOML parsing, bounded (`safejson`).
No disk and no clock but one passed in.
May import: the flat modules.
"""
