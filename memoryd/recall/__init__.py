"""Recall: search, path-scoped recall and `show` over both tiers of a memory dir.

`store` keeps one SQLite/FTS5 search index per memory dir in memoryd's state dir, brought up
to date by stat (the dir's `listing`, its files' `records` and `rows`; searches: `reads`);
`query` reads queries and time frames and ranks; `engine` ties discovery, the stores and the
results together for the commands and the MCP server.
"""
