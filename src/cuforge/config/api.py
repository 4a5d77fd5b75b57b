"""A recipe's ``[api]`` table: how discovery knows another checkout's fork of the package
(``cuforge.discovery.api``)."""

from __future__ import annotations

from dataclasses import dataclass

from cuforge.core.errors import ConfigError
from cuforge.core.tomlfile import refuse_unknown_keys


@dataclass(frozen=True)
class ApiRule:
    """A recipe's ``[api]``: the module and the functions its extension defines, by which
    discovery knows another checkout's fork of the same package (3DGS's simple-knn): a found
    extension with this module that defines these names gets this recipe's smoke and stress."""

    module: str                  # simple_knn._C
    defines: tuple[str, ...]     # distCUDA2: each a pybind11 .def("NAME", ...) in its sources


def parse_api(table: dict | None, where: str) -> ApiRule | None:
    if table is None:
        return None
    refuse_unknown_keys(table, {"module", "defines"}, f"{where} [api]", "[api]")
    module, defines = table.get("module"), table.get("defines")
    if not isinstance(module, str) or not module or not isinstance(defines, list) or not defines:
        raise ConfigError(f"{where} [api]: needs module (a string) and defines (a list of names)",
                          hint='e.g. module = "simple_knn._C", defines = ["distCUDA2"]')
    return ApiRule(module, tuple(str(d) for d in defines))
