"""The trash: where memoryd puts a memory instead of deleting it, and how it comes back.

May import memoryd's base modules (errors, paths, fsops, safejson, state), scan, gitwork,
openfiles and versions (a trashed file's kept versions).
"""
