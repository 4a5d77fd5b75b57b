// cuforge: force libstdc++'s C++11 ABI (std::string = std::__cxx11::basic_string).
//
// torch >= 2.7 wheels are built with _GLIBCXX_USE_CXX11_ABI=1, but tetra_triangulation's
// cmake/FindTorch.cmake adds -D_GLIBCXX_USE_CXX11_ABI=0 to every compile, and a later "=1" on the
// command line loses to it. The extension then references old-ABI symbols such as
// c10::detail::torchCheckFail(..., std::string const&) (mangled ...RKSs) that torch does not
// export, and import fails with "undefined symbol". This header is included first in every
// translation unit, before any standard header reads the macro, so the ABI matches torch again.
#pragma once

#ifdef _GLIBCXX_USE_CXX11_ABI
#undef _GLIBCXX_USE_CXX11_ABI
#endif
#define _GLIBCXX_USE_CXX11_ABI 1
