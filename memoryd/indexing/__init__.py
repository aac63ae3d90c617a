"""The index pass: keep a memory dir's MEMORY.md in step with its files: the scan, the one
read path, the plan, the write and the use cases (`passes`).
May import: discover, model, storage, and the flat modules.
"""
