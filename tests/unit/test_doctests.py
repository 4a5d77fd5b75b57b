"""Every ``>>>`` example in the package is run (issue 52: 40 modules held examples, the suite ran
2 of them, and 2 of 58 failed): an example is documentation a reader trusts, so it is a test.
Each module with one is imported and its examples run with doctest; an example doctest would
not find (in a comment, a string that is not a docstring) or one marked ``+SKIP`` fails here."""

from __future__ import annotations

import doctest
import importlib
import re
from pathlib import Path

import pytest

import cuforge

PACKAGE = Path(cuforge.__file__).parent
PROMPT = re.compile(r"^\s*>>> ", re.M)


def _module(path: Path) -> str:
    parts = ["cuforge", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


WITH_EXAMPLES = sorted(_module(p) for p in PACKAGE.rglob("*.py") if PROMPT.search(p.read_text()))


def test_the_package_has_examples():
    assert len(WITH_EXAMPLES) >= 40


@pytest.mark.parametrize("name", WITH_EXAMPLES)
def test_every_example_runs_and_holds(name):
    module = importlib.import_module(name)
    tests = doctest.DocTestFinder(exclude_empty=True).find(module, name)
    found = sum(len(t.examples) for t in tests)
    source = Path(module.__file__).read_text()
    assert found == len(PROMPT.findall(source)), "an example doctest does not see"
    assert "+SKIP" not in source, "an example that is not run"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0 and result.attempted == found
