"""The trash: where memoryd puts a memory instead of deleting it, and how it comes back
(restore, forget, crash recovery, pins).
May import: commands, discover, dream, indexing, model, storage, versions, and the flat
modules.
"""
