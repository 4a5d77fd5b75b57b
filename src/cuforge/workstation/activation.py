"""The env file setup writes (each variable with its why) and the hook in ``bin/activate``
that sources it, both rewritten atomically so that running setup again changes nothing."""

from __future__ import annotations

import os
import re
import shlex
import tempfile
from pathlib import Path

from cuforge.config.stacks import Stack, env_file_text


HOOK_BEGIN = "# >>> cuforge setup {name} >>>"


HOOK_END = "# <<< cuforge setup {name} <<<"


def env_file(venv_dir: Path, stack: str) -> Path:
    return venv_dir / f"cuforge-{stack}.env"


def write_env(venv_dir: Path, stack: Stack) -> Path:
    """Write the env file and hook it into ``bin/activate`` (replacing an earlier hook of the
    same stack, so running setup again changes nothing)."""
    path = env_file(venv_dir, stack.name)
    _atomic_write(path, env_file_text(stack))
    activate = venv_dir / "bin" / "activate"
    text = activate.read_text()
    begin, end = HOOK_BEGIN.format(name=stack.name), HOOK_END.format(name=stack.name)
    text = re.sub(rf"\n?{re.escape(begin)}.*?{re.escape(end)}\n", "\n", text, flags=re.S)
    hook = f"{begin}\n. {_sh_quote(path)}\n{end}\n"
    _atomic_write(activate, text.rstrip("\n") + "\n\n" + hook)
    return path


def _sh_quote(path: Path) -> str:
    return shlex.quote(str(path))


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    if path.exists():
        os.chmod(tmp, path.stat().st_mode & 0o777)
    os.replace(tmp, path)
