import sys
from pathlib import Path

from cuforge.verify.smoke import run_smoke


def test_a_smoke_script_named_like_its_package_imports_the_package(tmp_path):
    """smoke/spconv.py must test the spconv package, not import itself."""
    site = tmp_path / "site" / "fakepkg"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("REAL = True\n")
    smoke = tmp_path / "smoke"
    smoke.mkdir()
    (smoke / "_helper.py").write_text("ANSWER = 42\n")
    (smoke / "fakepkg.py").write_text(
        "import sys\nimport fakepkg\nfrom _helper import ANSWER\n"
        "assert getattr(fakepkg, 'REAL', False), 'imported the script itself'\n"
        "assert ANSWER == 42\nprint('pass: real package')\nsys.exit(0)\n")
    result = run_smoke(Path(sys.executable), smoke / "fakepkg.py", [tmp_path / "site"])
    assert result.status == "pass", result.detail


def test_exit_77_still_means_skipped(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("import sys\nprint('skipped: no GPU')\nsys.exit(77)\n")
    assert run_smoke(Path(sys.executable), script).status == "skipped"
