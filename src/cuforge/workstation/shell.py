"""``invoke shell``: a shell inside a combo env with the build environment set."""

from __future__ import annotations

import os
import shlex

from cuforge.env import venv
from cuforge.config.combos import Combo
from cuforge.core.project import Project
from cuforge.env.target import resolve
from cuforge.env.toolchain import build_environment, default_jobs


def combo_build_env(project: Project, combo: Combo) -> dict[str, str]:
    target = resolve(project, combo)
    combo_env = venv.prepare(project.state_dir, combo, target,
                             log=project.state_dir / "logs" / "shell.log")
    out = build_environment(combo_env.toolkit, combo.arches, jobs=default_jobs(),
                            cxx11_abi=combo_env.info.cxx11_abi,
                            extra_include=list(combo_env.info.nvidia_include),
                            extra_lib=list(combo_env.info.nvidia_lib),
                            bin_dirs=[combo_env.bin_dir, *target.bin_dirs])
    out.update(target.env)   # emulation's variables: the shell runs the target's code too
    if combo_env.root:
        out["VIRTUAL_ENV"] = str(combo_env.root)
    return out


def open_shell(project: Project, combo: Combo, *, print_only: bool = False) -> int:
    env = combo_build_env(project, combo)
    if print_only:
        for k, v in sorted(env.items()):
            print(f"export {k}={shlex.quote(v)}")
        return 0
    shell = os.environ.get("SHELL", "/bin/bash")
    print(f"cuforge: entering {combo.id} (exit to leave)")
    os.execvpe(shell, [shell], {**os.environ, **env, "CUFORGE_COMBO": combo.id})
    return 0  # not reached
