"""The board side on the host: deploy to a MicroPython board, and the emulated
board (the unix port behind a REPL socket)."""
