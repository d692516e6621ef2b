"""docs/python.md's worked example runs as written (from the checkout's root) and prints a row
per layer whose certified bounds hold."""

import contextlib
import io
import os
import re

from conftest import ROOT


def test_worked_example_runs():
    text = (ROOT / "docs" / "python.md").read_text()
    block = re.search(r"<!-- example: python/tests/test_docs.py -->\n```python\n(.*?)```", text,
                      re.S)
    assert block, "the worked example is missing from docs/python.md"
    out = io.StringIO()
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(block.group(1), "docs/python.md", "exec"), {"__name__": "example"})
    finally:
        os.chdir(cwd)
    rows = [line.split() for line in out.getvalue().splitlines()[1:]]
    assert [int(r[0]) for r in rows] == [0, 1, 2, 3]
    for _, omitted, certified, error, certified_error in rows:
        assert 0 <= float(omitted) <= float(certified) <= 1
        assert 0 <= float(error) <= float(certified_error)
