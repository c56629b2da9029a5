# holdfast host tooling.  `make setup` then `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.requirements.stamp

.PHONY: setup test bench clean mosquitto

setup: $(STAMP) mosquitto

# Re-runs pip only when requirements.txt changed (or the venv is new).
$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q -r requirements.txt
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

test: setup
	$(PY) -m pytest host_tests -q

bench: setup
	$(PY) tools/bench.py

clean:
	rm -rf build .pytest_cache .hypothesis .mypy_cache
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -print0 | xargs -0 rm -rf
