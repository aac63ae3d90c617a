"""Discovery: which memory dirs there are, the code tree each talks about, Claude Code's view.

May import memoryd's base modules (config, errors, paths, fsops, safejson), model/ (index)
and its own neighbours (claude_env, cwd_cache, gitwork); the runtime only for type hints.
"""
