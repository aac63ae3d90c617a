"""The dream pass, one use case: read and plan (also for `explain` and `ack`), write, report;
and its pure rules (staleness, duplicates, contradictions); the flags a person acknowledged
(`acked`) and the consult evidence the MCP server leaves for its guard (`consults`).
May import: discover, indexing, model, storage, trash, versions, and the flat modules.
"""
