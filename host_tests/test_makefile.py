"""`make help` names every target; `make run SCRIPT=...` runs a user's
script on the MicroPython unix port with holdfast (and asyncio, in
.frozen) importable."""

import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make(*args):
    return subprocess.run(["make", "-s", "--no-print-directory"] + list(args), cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def phony_targets():
    with open(os.path.join(ROOT, "Makefile")) as f:
        return {t for line in f if line.startswith(".PHONY:") for t in line.split()[1:]}


def test_help_names_every_target():
    targets = phony_targets()
    assert {"setup", "test", "run", "help", "deploy"} <= targets, targets
    p = make("help")
    assert p.returncode == 0, p.stderr
    listed = set(re.findall(r"^make (\S+)", p.stdout, re.M))
    assert targets <= listed, (targets - listed, p.stdout)
    assert len(p.stdout.splitlines()) == len(listed), p.stdout  # one line each


def test_run_a_script_on_the_unix_port(tmp_path):
    script = tmp_path / "mine.py"
    script.write_text("import sys, asyncio\n"
                      "from holdfast import MQTTClient, MQTTException\n"
                      "print(sys.implementation.name, sys.argv[1:], MQTTException.__name__)\n")
    p = make("run", "SCRIPT=%s" % script, "ARGS=one two")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.splitlines()[-1] == "micropython ['one', 'two'] MQTTError", p.stdout


def test_run_without_a_script_says_how():
    p = make("run")
    assert p.returncode != 0
    assert "usage: make run SCRIPT=my.py" in p.stderr, p.stderr
