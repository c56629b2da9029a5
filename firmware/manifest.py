# Freeze holdfast into a custom MicroPython firmware: the bytecode then runs
# from flash, and only the objects it creates at import (functions, classes,
# module dicts) and the client's state take heap (docs/footprint.md).
# From a MicroPython checkout of the same release as mpy-cross here, as
# MicroPython's documentation describes the build (its
# docs/reference/manifest.rst and each port's README.md):
#
#   make -C ports/esp32 BOARD=ESP32_GENERIC FROZEN_MANIFEST=<holdfast>/firmware/manifest.py
#   make -C ports/rp2 BOARD=RPI_PICO_W FROZEN_MANIFEST=<holdfast>/firmware/manifest.py
#
# (for the bench's frozen column, the unix port with tools/bench/mp/manifest.py,
# which includes this one: docs/footprint.md).
#
# The port's own frozen modules (asyncio, ntptime, network drivers) stay: the
# board's manifest is included, else the port's; the unix port has neither a
# board nor ports/unix/boards: its default variant's then (another variant:
# BOARD_DIR=<ports/unix>/variants/NAME).
# Only a manifest that does not exist is skipped: an error inside one (say a
# require() without micropython-lib) still stops the build.
for _port_manifest in ("$(BOARD_DIR)/manifest.py", "$(PORT_DIR)/boards/manifest.py",
                       "$(PORT_DIR)/variants/standard/manifest.py"):
    try:
        include(_port_manifest)
        break
    except Exception as e:
        # makemanifest wraps each failing level in "Error in manifest file":
        # once means this very file is missing, more means one it included failed.
        if "No such file" not in str(e) or str(e).count("Error in manifest file") > 1:
            raise

# /lib/holdfast on a board, `import holdfast` as usual: every .py of
# firmware/holdfast (paths are relative to this file). broker.py, the
# broker's half of the codec, comes along: frozen, it costs flash, not RAM.
package("holdfast", base_path=".", opt=3)

# To freeze the board application as well (then only main.py and config.json
# go to the filesystem), add for example:
#   module("app.py", base_path="../boards/common")
#   module("wifi.py", base_path="../boards/common")
#   module("board.py", base_path="../boards/esp32")
