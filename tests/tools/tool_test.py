"""Shared by the end-to-end tests of amc's command-line tools (Python 3 standard library only):
failures are collected rather than raised, so that one run reports every broken check."""

import subprocess

FAILURES = []


def check(condition, message):
    """Records `message` as a failure unless `condition` holds; returns `condition`."""
    if not condition:
        FAILURES.append(message)
    return condition


def run(args, expect=0, env=None):
    """Runs a tool; a failure unless it exits with `expect`."""
    result = subprocess.run(args, capture_output=True, text=True, errors="replace", timeout=300,
                            env=env)
    check(result.returncode == expect,
          f"{' '.join(args)}: exit {result.returncode}, expected {expect}; stderr: {result.stderr}")
    return result


def check_refusal(args, words):
    """A usage error: exit status 2 and one line on stderr containing every one of `words`."""
    result = run(args, expect=2)
    lines = result.stderr.strip().splitlines()
    check(len(lines) == 1, f"{args}: expected one line on stderr, got {result.stderr!r}")
    check(all(w in result.stderr for w in words), f"{args}: stderr {result.stderr!r} lacks {words}")


def report(name):
    """Prints every failure (or that all passed) and returns the exit status: 1 on failure."""
    for failure in FAILURES:
        print("FAIL:", failure)
    if FAILURES:
        return 1
    print(f"{name}: all checks passed")
    return 0
