"""docs/python.md's transformers example runs as written (from the checkout's root) and prints
16 generated tokens and, per decode step, a least retained mass in (0, 1]."""

import ast
import contextlib
import io
import os
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_transformers_example_runs():
    text = (ROOT / "docs" / "python.md").read_text()
    block = re.search(r"<!-- example: python/tests_transformers/test_docs_example.py -->\n"
                      r"```python\n(.*?)```", text, re.S)
    assert block, "the transformers example is missing from docs/python.md"
    code = block.group(1)
    model_file = os.environ.get("AMC_MODEL_FILE")
    if model_file:  # the model where ctest says it is, not necessarily in ~/.cache/amc
        folder = os.path.dirname(model_file)
        assert 'os.path.expanduser("~/.cache/amc")' in code
        code = code.replace('os.path.expanduser("~/.cache/amc")', repr(folder))
    out = io.StringIO()
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, "docs/python.md", "exec"), {"__name__": "example"})
    finally:
        os.chdir(cwd)
    lines = out.getvalue().splitlines()
    prefix = "least retained mass per step: "
    assert lines[-1].startswith(prefix)
    masses = ast.literal_eval(lines[-1].removeprefix(prefix))
    assert len(masses) == 15
    assert all(0 < m <= 1 + 1e-6 for m in masses)
    assert min(masses) < 1  # a real budget on a 659-token prompt leaves mass out
