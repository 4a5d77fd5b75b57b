"""``cuforge resolve``: does a combo's torch + CUDA toolkit install on the combo's platform?

uv resolves the same requirements the combo's env would get, for the combo's platform and
Python, without installing anything, so the DGX Spark's aarch64 combos can be checked from an
x86_64 machine (only wheels count: nothing may need building on the target).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from cuforge.config.combos import Combo
from cuforge.core.errors import EnvError, ToolchainError
from cuforge.core.runner import capture
from cuforge.env.programs import find_uv
from cuforge.env.target import Target
from cuforge.env.venv import index_args, is_ready, requirements


# uv's exit status when it could not run at all (its config, its cache, the network); 1 is
# "no solution": the combo's torch and toolkit do not exist for its platform
UV_COULD_NOT_RUN = 2


@dataclass(frozen=True)
class InstallResolution:
    """Pinned versions (normalized name -> version) of everything the combo's env would hold."""

    combo: str
    platform: str
    torch: str
    pins: dict[str, str]

    @property
    def cuda_torch(self) -> bool:
        """A CUDA build of torch: a ``+cuXYZ`` local version, or cuBLAS among its dependencies
        (the toolkit wheels bring nvcc and cudart, never cuBLAS)."""
        local = self.pins.get("torch", "").partition("+")[2]
        return local.startswith("cu") or any(n.startswith("nvidia-cublas") for n in self.pins)


def resolve_command(combo: Combo, reqs_file: Path) -> list[str]:
    """The ``uv pip compile`` call that resolves ``combo`` for its platform."""
    return [find_uv(), "pip", "compile", "--quiet", "--no-header", "--no-annotate",
            "--no-python-downloads", "--python-platform", combo.target_platform.uv_platform,
            "--python-version", combo.python, "--only-binary", ":all:", *index_args(combo),
            str(reqs_file)]


def resolve(combo: Combo) -> InstallResolution:
    """Resolve ``combo`` (its current torch) for its platform; ToolchainError if it cannot be."""
    with tempfile.TemporaryDirectory(prefix="cuforge-resolve-") as tmp:
        reqs = Path(tmp) / "requirements.in"
        reqs.write_text("\n".join(requirements(combo)) + "\n")
        try:
            out = capture(resolve_command(combo, reqs), error=ToolchainError)
        except ToolchainError as err:
            if err.returncode == UV_COULD_NOT_RUN:
                raise EnvError(f"uv could not resolve combo {combo.id}'s env: {err}",
                               hint="fix uv's configuration (uv.toml, UV_CONFIG_FILE) or "
                                    "reach its index, then run again") from None
            raise ToolchainError(
                f"torch {combo.torch} + the CUDA {combo.accel.cuda} toolkit of combo {combo.id} "
                f"do not resolve for {combo.target_platform.name}: {err}",
                hint="check the combo's torch version and torch_index (envs/combos.toml): "
                     "not every torch version has CUDA wheels for every platform") from None
    pins = {}
    for line in out.splitlines():
        name, sep, version = line.strip().partition("==")
        if sep:
            pins[name.strip().lower()] = version.strip()
    found = InstallResolution(combo.id, combo.target_platform.name, combo.torch, pins)
    if not found.cuda_torch:
        where = combo.torch_index or "the default index"
        raise ToolchainError(
            f"torch {pins.get('torch', combo.torch)} for {combo.target_platform.name} from "
            f"{where} is a CPU build (combo {combo.id} needs CUDA {combo.accel.cuda})",
            hint="pick a torch version that has CUDA wheels for this platform there, or set "
                 "torch_index to the accel's CUDA index (envs/combos.toml)")
    return found


def require_resolvable(state_dir: Path, combo: Combo) -> None:
    """An env that ``venv.prepare`` would create must resolve first (its torch and toolkit
    exist for its platform): ``--torch 9.9`` is refused before a venv is half made. An env made
    already, or a combo's own interpreter, is checked where ``venv.prepare`` reads it."""
    if not combo.interpreter and not is_ready(state_dir, combo):
        resolve(combo)


def check_combo_env(state_dir: Path, combo: Combo, target: Target) -> None:
    """The combo's env can be had: its emulator works (a combo of another platform), and an
    env not made yet resolves (its torch and toolkit exist for its platform: ``--torch 9.9``
    is refused here, not after a venv was half made). An existing env or interpreter is
    checked where it is read (``venv.prepare``, ``venv.inspect``)."""
    target.require_usable()
    require_resolvable(state_dir, combo)
