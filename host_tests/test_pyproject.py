"""pyproject.toml installs holdfast into a venv the standard way: a fresh
venv, `pip install <checkout>`, and the README's first example runs against
the private mosquitto with the installed package (not firmware/ on the path),
from a directory outside the checkout."""

import os
import shutil
import subprocess
import sys

from test_docs import BROKER_NAMES, RESOLVE, blocks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The example's broker name resolves to the private mosquitto (as in
# test_docs.py), and the example says where holdfast came from.
PRELUDE = RESOLVE + """\
import holdfast
print("holdfast from", holdfast.__file__)
"""


def test_pip_install_into_a_fresh_venv_runs_the_readme_example(tmp_path, mosquitto):
    # A copy of what the package is made of, so the build leaves the checkout alone.
    src = tmp_path / "src"
    (src / "firmware").mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(ROOT, name), src / name)
    shutil.copytree(os.path.join(ROOT, "firmware", "holdfast"), src / "firmware" / "holdfast",
                    ignore=shutil.ignore_patterns("__pycache__"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = str(venv / "bin" / "python")
    p = subprocess.run([py, "-m", "pip", "install", "--disable-pip-version-check", "-q", str(src)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    example = next(b for b in blocks("README.md") if b.lang == "python" and not b.not_run)
    script = tmp_path / "run" / "example.py"
    script.parent.mkdir()
    script.write_text(PRELUDE % {"names": BROKER_NAMES, "host": mosquitto.host,
                                 "port": mosquitto.port} + example.text)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MICROPYPATH")}
    p = subprocess.run([py, str(script)], cwd=str(script.parent), env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    first = p.stdout.splitlines()[0]
    assert first.startswith("holdfast from " + str(venv)), p.stdout
    assert "Traceback" not in p.stdout + p.stderr, p.stdout + p.stderr
