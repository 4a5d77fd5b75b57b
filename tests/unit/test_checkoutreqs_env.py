"""The checkout's requirements are installed in the target's environment: under emulation an
sdist's build backend runs the venv's aarch64 Python, which QEMU loads only with
QEMU_LD_PREFIX (seen 2026-12-02: sharedarray's build under `setup pointcept --combo
spark-emulated` stopped with `qemu-aarch64: Could not open '/lib/ld-linux-aarch64.so.1'`)."""

import sys

from cuforge.env.checkoutreqs import CheckoutRequirement, IndexOptions, install

# a stand-in installer that succeeds only when the variable reached it; it is a real process
CHECK = "import os, sys; sys.exit(0 if os.environ.get('QEMU_LD_PREFIX') == '/target-root' else 3)"


def _installer(*args: str) -> tuple[str, ...]:
    return (sys.executable, "-c", CHECK, *args)


def test_the_installer_runs_in_the_given_environment():
    reqs = [CheckoutRequirement("sharedarray", "README.md:192")]
    got = install(_installer, reqs, [], IndexOptions(), torch_version=lambda: "2.14.1",
                  python="3.11", platform="linux-aarch64",
                  env={"QEMU_LD_PREFIX": "/target-root", "PATH": "/usr/bin:/bin"})
    assert [r.name for r in got.installed] == ["sharedarray"] and not got.missing


def test_without_it_the_requirement_is_reported_missing():
    reqs = [CheckoutRequirement("sharedarray", "README.md:192")]
    got = install(_installer, reqs, [], IndexOptions(), torch_version=lambda: "2.14.1",
                  python="3.11", platform="linux-aarch64", env={"PATH": "/usr/bin:/bin"})
    assert not got.installed and [m.requirement.name for m in got.missing] == ["sharedarray"]
