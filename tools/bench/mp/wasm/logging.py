# On the WebAssembly port only (tools/bench/footprint.py puts this directory
# first on its path): the port's pyscript build freezes micropython-lib's
# logging, which a board's firmware does not have. Importing it fails here
# as on a board, so mqtt_async uses its own stub logger, as it does on the
# unix port.
raise ImportError("no module named 'logging'")
