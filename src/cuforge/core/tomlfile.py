"""Reading cuforge's TOML data files (combos, accels, recipes, patch sets) with errors that name
the file and line, for people."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from cuforge.core.errors import ConfigError


def read_toml(path: Path, what: str) -> dict:
    """``path`` parsed; a syntax error is a ConfigError ``<path>:<line>: ...`` with a fix line.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:   # doctest: +ELLIPSIS
    ...     bad = Path(d, "x.toml")
    ...     _ = bad.write_text("name = =")
    ...     read_toml(bad, "recipe")
    Traceback (most recent call last):
    ...
    cuforge.core.errors.ConfigError: /.../x.toml:1: not valid TOML: Invalid value (at line 1, ...)
      fix: fix the recipe's syntax at line 1 (quoted strings, `key = value`, [tables]; see ...)
    """
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path} is missing", hint=f"create the {what} file, or run from a "
                          "cuforge checkout (or set CUFORGE_ROOT)") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path} is not UTF-8 text ({err.reason})",
                          hint=f"save the {what} as UTF-8") from None
    except tomllib.TOMLDecodeError as err:
        found = re.search(r"at line (\d+), column (\d+)", str(err))
        line = found.group(1) if found else "?"
        raise ConfigError(f"{path}:{line}: not valid TOML: {err}",
                          hint=f"fix the {what}'s syntax at line {line} "
                          "(quoted strings, `key = value`, [tables]; see https://toml.io)"
                          ) from None


def refuse_unknown_keys(table: dict, allowed: set[str], where: str, section: str) -> None:
    """A ConfigError naming the keys of ``table`` that ``section`` does not have.

    >>> refuse_unknown_keys({"scripts": 1}, {"script"}, "recipes/x.toml [stress]", "[stress]")
    Traceback (most recent call last):
    ...
    cuforge.core.errors.ConfigError: recipes/x.toml [stress]: unknown keys ['scripts']
      fix: [stress] may have: script
    """
    unknown = set(table) - allowed
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}",
                          hint=f"{section} may have: {', '.join(sorted(allowed))}")

