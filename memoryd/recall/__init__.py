"""Search and recall: an SQLite FTS5 index per memory dir, the query engine, and the MCP
server (`mcp_server`, on the official SDK).
May import: discipline, discover, dream, indexing, model, storage, and the flat modules.
"""
