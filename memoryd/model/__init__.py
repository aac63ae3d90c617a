"""Pure values in, values out: memory files, the index grammar and its edits, links.
No disk and no clock but one passed in.
May import: discipline, storage, and the flat modules.
"""
