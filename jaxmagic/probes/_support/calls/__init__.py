"""The user's call, as several probes read it: its arguments by name, through a library's wrapper, from the host."""
