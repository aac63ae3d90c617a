"""Kept versions of every memory and index memoryd reads, by content in `state.sqlite`;
retention on a checked clock (`witness`), purges of secrets, a memory's history.
May import: commands, daemon, discover, indexing, model, recall, storage, trash, and the flat
modules.
"""
