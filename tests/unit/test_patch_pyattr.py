"""The structural rename (kind = "rename_attribute") on small sources: found by the AST whatever
the alias, undone by its markers, blind to look-alikes."""

from __future__ import annotations

import pytest

from cuforge.patching.model import PatchStatus
from cuforge.patching.pyattr import RenameAttribute

OP = RenameAttribute("numpy", "in1d", "isin", "cuforge: np.in1d is gone in NumPy 2")
MARK = "  # cuforge: np.in1d is gone in NumPy 2"


@pytest.mark.parametrize(("source", "patched"), [
    ("import numpy as np\nm = np.in1d(a, b)\n", f"import numpy as np\nm = np.isin(a, b){MARK}\n"),
    ("import numpy\nm = numpy.in1d(a, b)\n", f"import numpy\nm = numpy.isin(a, b){MARK}\n"),
    ("from numpy import in1d\n", f"from numpy import isin as in1d{MARK}\n"),
    ("from numpy import in1d as f\n", f"from numpy import isin as f{MARK}\n"),
    ("from numpy import in1d as isin\n", f"from numpy import isin{MARK}\n"),
    # columns are bytes in the AST: a non-ASCII string before the use must not shift the edit
    ('import numpy as np\nm = ("é", np.in1d(a, b))\n',
     f'import numpy as np\nm = ("é", np.isin(a, b)){MARK}\n'),
    # the marker goes where the statement ends, past a backslash continuation
    ("import numpy as np\nm = np.in1d(a, b) if \\\n    c else d\n",
     f"import numpy as np\nm = np.isin(a, b) if \\\n    c else d{MARK}\n"),
    ("import numpy as np\r\nm = np.in1d(a, b)\r\n", f"import numpy as np\r\nm = np.isin(a, b){MARK}\r\n"),
])
def test_rename_and_back(source: str, patched: str) -> None:
    assert OP.probe(source).status is PatchStatus.NOT_APPLIED
    assert OP.forward(source) == patched
    assert OP.probe(patched).status is PatchStatus.APPLIED
    assert OP.reverse(patched) == source


@pytest.mark.parametrize("source", [
    "import torch as np\nm = np.in1d(a, b)\n",              # np is not numpy here
    "import numpy as np\nclass A:\n    def in1d(self): pass\nA().in1d()\n",
    "import numpy as np\ns = 'np.in1d(a, b)'\n",
    "import numpy as np\nm = np.isin(a, b)\n",
    "def broken(:\n    np.in1d(a, b)\n",                      # not Python: left alone
])
def test_nothing_to_do(source: str) -> None:
    assert not OP.concerns(source)
    assert OP.probe(source).status is PatchStatus.NOT_NEEDED
