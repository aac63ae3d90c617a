"""The trash: where memoryd puts a memory instead of deleting it, and how it comes back
(restore, crash recovery, pins); the journal of a pass's moves (`journal`) and what
superseded what, from the manifests (`lineage`).
May import: discover, indexing, model, storage, versions, and the flat modules.
"""
