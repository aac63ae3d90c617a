"""Pure renderers for people, rows in and text out: the one escaping step (`display`), the
one label of a dir (`dirlabel`), status, log, reports, the pager.
May import: daemon, discipline, discover, dream, model, recall, storage, trash, versions, and
the flat modules.
"""
