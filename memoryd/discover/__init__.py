"""Discovery: which memory dirs there are, the code tree each talks about, Claude Code's view.

May import memoryd's base modules (config, paths, errors, fsops, safejson, index) and model/.
"""
