"""A parsed ``build`` command, typed and validated at the CLI edge: what the plan is made from
(``plan.make_plan``) and what the executor then follows (``pipeline.executor``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cuforge.config.arches import ArchPolicy
from cuforge.config.checkout import UserCheckout
from cuforge.config.combos import Combo
from cuforge.env.target import Target
from cuforge.env.torchinfo import TorchInfo
from cuforge.pipeline.cache_config import CacheConfig


@dataclass(frozen=True)
class BuildRequest:
    """A parsed ``build`` command: typed and validated at the CLI edge."""

    combo: Combo
    packages: tuple[str, ...] = ()
    jobs: int = 1
    verbose: bool = False
    dry_run: bool = False
    keep_going: bool = False
    src_overrides: tuple[tuple[str, Path], ...] = ()
    checkout: UserCheckout | None = None   # setup: the packages it holds are built from it
    prefer_prebuilt: bool = True
    arch_policy: ArchPolicy | None = None   # overrides every recipe's (e.g. cumm: ptx | native)
    skip_smoke: bool = False
    rebuild: bool = False          # rebuild packages whose wheel is up to date
    one_at_a_time: bool = False    # packages one after another, each with every job
    # the compiler cache, decided by whoever makes the request (cache_config.decide: the
    # CLI with --cache and --scheduler, setup); the default: local storage, nothing configured
    cache: CacheConfig = CacheConfig()
    upstream_tests: bool = False   # last stage: each recipe's [upstream_tests] on its wheel
    stress: bool = False           # last stage: each recipe's [stress] on its wheel
    sanitize: bool = False         # ... short, under compute-sanitizer memcheck
    team_wheels: str = ""          # --wheels URL|DIR: a team's index, tried before compiling
    kernels: str | None = None   # --kernels NAME (lean, full, a recipe's narrower set); None: each recipe's [kernels].set
    target: Target | None = None   # decided by the caller already (setup); else by build()
    # an interpreter combo's interpreter, probed by the caller already (setup, whose combo has
    # its torch); else by the env's preparation (venv.prepare)
    interpreter: TorchInfo | None = None

    def __post_init__(self) -> None:
        if self.arch_policy is not None:
            object.__setattr__(self, "arch_policy", ArchPolicy(self.arch_policy))
