"""The trash: where memoryd puts a memory instead of deleting it, and how it comes back
(restore, forget, crash recovery, pins).
May import indexing, versions, discover, discipline, model, storage and the flat plumbing.
"""
