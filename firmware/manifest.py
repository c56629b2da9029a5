# Freeze holdfast into a custom MicroPython firmware: the bytecode then runs
# from flash and costs next to no RAM (see docs/boards.md for the figures).
# From a MicroPython checkout of the same release as mpy-cross here:
#
#   make -C ports/esp32 BOARD=ESP32_GENERIC FROZEN_MANIFEST=<holdfast>/firmware/manifest.py
#   make -C ports/rp2 BOARD=RPI_PICO_W FROZEN_MANIFEST=<holdfast>/firmware/manifest.py
#
# The board's own frozen modules (asyncio, ntptime, network drivers) stay:
# its manifest is included first (a board without one uses the port's).
try:
    include("$(BOARD_DIR)/manifest.py")
except Exception:
    include("$(PORT_DIR)/boards/manifest.py")

# /lib/holdfast on a board, `import holdfast` as usual: every .py of
# firmware/holdfast (paths are relative to this file). broker.py, the
# broker's half of the codec, comes along: frozen, it costs flash, not RAM.
package("holdfast", base_path=".", opt=3)

# To freeze the board application as well (then only main.py and config.json
# go to the filesystem), add for example:
#   module("app.py", base_path="../boards/common")
#   module("wifi.py", base_path="../boards/common")
#   module("board.py", base_path="../boards/esp32")
