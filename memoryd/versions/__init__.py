"""Kept versions: every version of a memory file memoryd read, by content, in `state.sqlite`
(memoryd.storage.statedb), with their history, the mass-change alarm, retention and the clock
check (witness). May import memoryd.storage, the model modules, fsops, gitwork and paths."""
