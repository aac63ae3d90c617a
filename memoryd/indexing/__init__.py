"""The index pass: keep a memory dir's MEMORY.md in step with its files (read -> plan -> write).
Holds the scan, the one read of a dir, the plan, the write and the use cases (`passes`).
May import memoryd.model, memoryd.storage and the flat modules; never commands, daemon or dream.
"""
