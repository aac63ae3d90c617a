"""Kept versions of every memory and index memoryd reads, by content in `state.sqlite`;
retention on a checked clock (`witness`), purges of secrets, a memory's history.
May import indexing (the scan), discover, discipline, model, storage and the flat plumbing.
"""
