"""Claude Code integration: the hooks (`memoryd hook EVENT`), settings install/uninstall
and the plugin folder shipped as package data.
May import every folder but commands and daemon; a hook imports only what it needs.
"""
