"""Machine facts come from data/platforms.toml through cuforge.env.target / cuforge.config.platforms only:
no other module asks the machine what it is or spells a platform's names (issue 42)."""

from __future__ import annotations

import re
from pathlib import Path

import cuforge
from cuforge.config import platforms

PACKAGE = Path(cuforge.__file__).parent
OWNERS = {"target.py", "platforms.py"}
# what a module would write to learn or name the machine on its own
FORBIDDEN = re.compile(r"platform\.machine\(\)|os\.uname\(\)|\"sbsa|x86_64-linux|QEMU_LD_PREFIX")


def test_only_target_and_platforms_name_the_machine():
    offenders = [f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}"
                 for path in sorted(PACKAGE.rglob("*.py")) if path.name not in OWNERS
                 for n, line in enumerate(path.read_text().splitlines(), 1)
                 if FORBIDDEN.search(line)]
    assert offenders == []


def test_the_grep_sees_a_forbidden_line(tmp_path):
    # the pattern itself must catch each spelling (else the test above cannot fail)
    for line in ('m = platform.machine()', 'os.uname().machine', 'x = "sbsa"',
                 '"x86_64-linux-gnu"', 'env["QEMU_LD_PREFIX"]'):
        assert FORBIDDEN.search(line), line


def test_each_platform_row_has_its_toolkit_and_library_names():
    aarch64 = platforms.get("linux-aarch64")
    assert (aarch64.cuda_target, aarch64.elf_machine, aarch64.triplet) == (
        "sbsa-linux", "EM_AARCH64", "aarch64-linux-gnu")
    assert platforms.by_elf_machine("EM_X86_64").cuda_target == "x86_64-linux"
    assert not platforms.is_foreign(platforms.build_platform())
