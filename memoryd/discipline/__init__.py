"""Rules on memory content: JSONL record stores and the findings on them.
May import: discover, dream, indexing, model, storage, and the flat modules.
"""
