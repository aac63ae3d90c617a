"""The pure model: memory files, the index's lines and rules, the held index, links.
No I/O here: functions of their arguments (a clock or a dir's bytes are passed in).
May import only each other and the standard library (and memoryd.agentview's view kinds).
"""
