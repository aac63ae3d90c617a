"""Which memory dirs there are as Claude Code finds them: slugs, relocation settings, the
code tree each talks about, git work trees, what the agent loads, the one label of a dir
(`dirlabel`).
May import: model, storage, and the flat modules.
"""
