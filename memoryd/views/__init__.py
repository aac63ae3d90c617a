"""Pure renderers for people, rows in and text out: status, log, reports, search results,
the pager.
May import: daemon, discover, dream, model, recall, storage, trash, versions, and the flat
modules.
"""
