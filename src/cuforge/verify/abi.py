"""Check 1: the libstdc++ dual ABI. torch >= 2.7 is built with ``_GLIBCXX_USE_CXX11_ABI=1``;
an extension built with ``=0`` (e.g. a CMake build that ignored torch's flags) references
``std::string`` in its old form and fails at import with
``undefined symbol: _ZN3c106detail14torchCheckFailEPKcS2_jRKSs``.

The classification reads the *mangled* names (so it works without ``c++filt``); ``c++filt``
only makes the report readable.

>>> abi_of("_ZN3c106detail14torchCheckFailEPKcS2_jRKSs")
'old'
>>> abi_of("_ZN3c106detail14torchCheckFailEPKcS2_jRKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE")
'new'
>>> abi_of("_Z5Ssizei") is None   # 'Ss' inside an identifier is not std::string
True
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from cuforge.core.elf import ElfLib, demangle
from cuforge.verify.report import CheckResult

Abi = Literal["old", "new"]

# Types whose layout differs between the two ABIs, as they appear right after ``St`` (std::).
_DUAL_ABI_NAMES = frozenset({
    "basic_string", "list", "_List_base", "basic_stringbuf", "basic_stringstream",
    "basic_istringstream", "basic_ostringstream",
})
# Two-letter std abbreviations of the Itanium ABI (``Ss`` = old ``std::string``).
_STD_ABBREV = frozenset("tabsiod")
_SHOWN = 8  # offending symbols listed per .so; the rest are counted


def _tokens(mangled: str) -> list[tuple[str, str]]:
    """Split a mangled name into ``("name", ident)`` and ``("sub", "Ss")`` tokens.

    Source names (``<length><identifier>``) are skipped as a whole, so letters inside an
    identifier are never taken for a substitution. Not a full demangler: enough to find
    ``Ss``/``Sb``, ``St12basic_string`` and ``__cxx11`` reliably.

    >>> _tokens("_ZNSt7__cxx1112basic_stringIcE")[:3]
    [('sub', 'St'), ('name', '__cxx11'), ('name', 'basic_string')]
    """
    out: list[tuple[str, str]] = []
    prev = ""  # the structural characters just stepped over (not inside a token)
    i, n = 0, len(mangled)
    while i < n:
        c = mangled[i]
        if c == "S" and i + 1 < n:
            sub = _substitution(mangled, i)
            if sub:
                out.append(("sub", sub))
                i, prev = i + len(sub), ""
                continue
        if c == "L" and i + 1 < n and mangled[i + 1].islower():
            end = mangled.find("E", i)  # literal such as Li42E: the value is not a name
            i, prev = (n if end < 0 else end + 1), ""
            continue
        if c.isdigit():
            j = i
            while j < n and mangled[j].isdigit():
                j += 1
            if _is_number(prev):
                i, prev = j, ""
                continue
            length = int(mangled[i:j])
            out.append(("name", mangled[j:j + length]))
            i, prev = j + length, ""
            continue
        prev = (prev + c)[-2:]
        i += 1
    return out


def _substitution(mangled: str, i: int) -> str:
    """The substitution starting at ``mangled[i] == "S"`` (``St``, ``Ss``, ``S0_``) or ''."""
    nxt = mangled[i + 1]
    if nxt in _STD_ABBREV:
        return "S" + nxt
    j = i + 1  # S<seq-id>_ back-reference
    while j < len(mangled) and (mangled[j].isdigit() or mangled[j].isupper()):
        j += 1
    return mangled[i:j + 1] if j < len(mangled) and mangled[j] == "_" else ""


def _is_number(prev: str) -> bool:
    """Whether digits after the structural characters ``prev`` are a number, not a length:
    template parameter ``T0_``, array ``A10_``, discriminator ``_1``, vector ``Dv4_``,
    constructor/destructor ``C1``/``D2``, unnamed type ``Ut0_``."""
    last = prev[-1:]
    return last in ("T", "A", "_", "C", "D") or prev in ("Dv", "Ut")


def abi_of(mangled: str) -> Abi | None:
    """``"old"`` / ``"new"`` when the symbol uses a dual-ABI type, else None."""
    if not mangled.startswith("_Z"):
        return None
    # Special names put a type right after a prefix: typeinfo name for short is _ZTSs, which
    # must not read as the old-string substitution "Ss" (seen on gcc 13: _ZTSs, _ZTSb).
    special = mangled[:4] in ("_ZTS", "_ZTI", "_ZTV", "_ZTT", "_ZGV")
    tokens = _tokens(mangled[4:] if special else mangled[2:])
    if any(kind == "name" and text in ("__cxx11", "cxx11") for kind, text in tokens):
        return "new"  # std::__cxx11:: namespace or the [abi:cxx11] tag
    for k, (kind, text) in enumerate(tokens):
        if kind == "sub" and text in ("Ss", "Sb"):
            return "old"
        if (kind == "name" and text in _DUAL_ABI_NAMES and k and tokens[k - 1] == ("sub", "St")):
            return "old"  # std::basic_string<...> spelled out, without __cxx11
    return None


def abi_offenders(lib: ElfLib, torch_cxx11_abi: bool) -> tuple[list[str], list[str]]:
    """(undefined, defined) dynamic symbols of ``lib`` that use the ABI torch does not."""
    bad: Abi = "old" if torch_cxx11_abi else "new"
    undefined, defined = [], []
    for sym in lib.dynamic_symbols():
        if abi_of(sym.name) == bad:
            (defined if sym.defined else undefined).append(sym.name)
    return sorted(set(undefined)), sorted(set(defined))


# Mangled prefixes of the C++ runtime's own namespaces (std::, __gnu_cxx::). A .so that links
# parts of libstdc++ statically defines such symbols in *both* ABIs; that is not a mismatch.
_RUNTIME_PREFIXES = ("_ZNS", "_ZNKS", "_ZSt", "_ZN9__gnu_cxx", "_ZNK9__gnu_cxx", "_ZGVNS",
                     "_ZTVS", "_ZTIS", "_ZTSS")


def is_runtime_symbol(mangled: str) -> bool:
    """True for std:: / __gnu_cxx:: symbols (``_ZNSs4swapERSs``), False for user code
    (``_Z5greetRKSs``)."""
    return mangled.startswith(_RUNTIME_PREFIXES)


def check_abi(so: Path, torch_cxx11_abi: bool) -> CheckResult:
    """Fail when ``so`` uses the other std::string ABI than torch.

    Undefined symbols of that kind cannot be provided by torch (import fails); defined ones in
    the .so's own code show it was compiled with the wrong ``_GLIBCXX_USE_CXX11_ABI`` and
    breaks as soon as a std::string crosses into torch. Defined symbols of the C++ runtime
    alone (std::, __gnu_cxx::) come from statically linked libstdc++ parts, which carry both
    ABIs: reported as a warning.
    """
    with ElfLib(so) as lib:
        undefined, defined = abi_offenders(lib, torch_cxx11_abi)
    flag = 0 if torch_cxx11_abi else 1
    want = 1 - flag
    if not undefined and not defined:
        return CheckResult("abi", "pass", f"no symbol uses the other C++ ABI (torch: "
                                          f"_GLIBCXX_USE_CXX11_ABI={want})")
    own = [s for s in defined if not is_runtime_symbol(s)]
    names = demangle(undefined[:_SHOWN] + (own or defined)[:_SHOWN])
    if not undefined and not own:
        lines = [f"no undefined or own symbol uses the other C++ ABI (torch: "
                 f"_GLIBCXX_USE_CXX11_ABI={want}); {len(defined)} C++-runtime symbols of the "
                 "other ABI are defined here (statically linked libstdc++ parts)"]
        lines += _listing("defined", defined, names)
        return CheckResult("abi", "warn", "\n".join(lines))
    lines = [f"built with _GLIBCXX_USE_CXX11_ABI={flag} but torch uses ={want}: "
             f"{len(undefined)} undefined + {len(own)} defined symbols use the "
             f"{'old' if flag == 0 else 'new (__cxx11)'} std::string"]
    lines += _listing("undefined", undefined, names) + _listing("defined", own, names)
    lines.append(f"fix: compile with -D_GLIBCXX_USE_CXX11_ABI={want} (take torch's flags; "
                 "a later -D on the command line wins)")
    return CheckResult("abi", "fail", "\n".join(lines))


def _listing(label: str, symbols: list[str], names: dict[str, str]) -> list[str]:
    lines = [f"  {label}: {names.get(s, s)}" for s in symbols[:_SHOWN]]
    if len(symbols) > _SHOWN:
        lines.append(f"  ... and {len(symbols) - _SHOWN} more {label}")
    return lines
