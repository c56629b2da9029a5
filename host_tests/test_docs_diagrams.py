"""The diagrams in docs/img are what tools/docs_diagrams.py draws today:
redrawn and compared pixel by pixel with the committed ones (the script
also checks every name it draws against the code)."""

import os
import subprocess
import sys

import numpy as np
from matplotlib.image import imread

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMAGES = ("data-path.png", "outbox-life.png")


def test_committed_diagrams_are_the_script_s(tmp_path):
    p = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "docs_diagrams.py"),
                        str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    for name in IMAGES:
        drawn = imread(str(tmp_path / name))
        committed = imread(os.path.join(ROOT, "docs", "img", name))
        assert drawn.shape == committed.shape, (name, drawn.shape, committed.shape)
        assert np.array_equal(drawn, committed), \
            "%s differs from what tools/docs_diagrams.py draws: run it and commit" % name


def test_the_docs_show_them():
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    for name in IMAGES:
        assert "(docs/img/%s)" % name in readme, name
