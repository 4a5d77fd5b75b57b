"""cuforge.verify.requirements asks a real interpreter what it has installed, so pip runs only
for what is missing (its resolver takes seconds even when nothing is)."""

from __future__ import annotations

import sys
from pathlib import Path

from cuforge.verify.requirements import installed_versions, unmet


def test_missing_and_out_of_range_requirements_are_unmet_the_rest_met():
    reqs = ["pytest", "pytest<1", "Packaging>=20", "cuforge-no-such-dist", "pytest[testing]>1"]
    assert unmet(Path(sys.executable), reqs) == ["pytest<1", "cuforge-no-such-dist"]


def test_paths_put_first_on_sys_path_count_and_local_versions_meet_a_plain_pin(tmp_path):
    info = tmp_path / "fakedist-2.11.0+cu130.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakedist\nVersion: 2.11.0+cu130\n")
    python = Path(sys.executable)
    assert installed_versions(python, ["fakedist"]) == {"fakedist": None}
    assert installed_versions(python, ["fakedist"], [tmp_path]) == {"fakedist": "2.11.0+cu130"}
    assert unmet(python, ["fakedist==2.11.0", "fakedist>=3"], [tmp_path]) == ["fakedist>=3"]


def test_an_interpreter_that_cannot_answer_meets_nothing(tmp_path):
    assert unmet(tmp_path / "no-python", ["pytest"]) == ["pytest"]
