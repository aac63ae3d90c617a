"""Kept versions of every memory and index memoryd reads, by content in `state.sqlite`;
retention on a checked clock (`witness`), purges of secrets, a file's versions listed.
May import: discover, indexing, model, storage, and the flat modules.
"""
