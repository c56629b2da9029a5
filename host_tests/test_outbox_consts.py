# The outbox modules keep their own copies of the record format's constants
# (a const() name with _ is inlined, not importable, and a public one costs a
# module-level name on the board). A copy that drifts would write or read a
# format the others do not: every copy must have its source's value.
import os
import re

import pytest

FW = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "firmware", "holdfast")
CONST = re.compile(r"^(_[A-Z0-9_]+) = const\(([^)]*)\)", re.M)
# source module -> the modules that copy its constants
COPIES = {"durable/log": ["durable/files", "durable/flash", "durable/scan", "durable/blocks", "durable/compaction",
                          "durable/heldlog", "durable/latest"],
          "durable/flash": ["durable/blocks"]}


def consts(name):
    with open(os.path.join(FW, name + ".py")) as f:
        return dict((n, eval(v)) for n, v in CONST.findall(f.read()))


@pytest.mark.parametrize("source", sorted(COPIES))
def test_copied_constants_have_their_sources_value(source):
    want = consts(source)
    checked = 0
    for other in COPIES[source]:
        for name, value in consts(other).items():
            if name in want:
                assert value == want[name], (other, name, value, source, want[name])
                checked += 1
    assert checked >= 3, (source, checked)  # the copies are still found
