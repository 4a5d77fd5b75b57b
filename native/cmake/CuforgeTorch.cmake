# Find torch through the Python interpreter (not TorchConfig.cmake, which re-detects CUDA and
# the GPU arches and crashes without a GPU) and define `cuforge_add_torch_extension()`.
#
# Works under scikit-build-core (Python_EXECUTABLE is given) and with plain cmake
# (-DPython_EXECUTABLE=/path/to/python). Arches come from CMAKE_CUDA_ARCHITECTURES / CUDAARCHS.
# The C++ standard and the _GLIBCXX_USE_CXX11_ABI value are taken from the torch found.

find_package(Python REQUIRED COMPONENTS Interpreter Development.Module)

if(DEFINED CUFORGE_TORCH_INCLUDE_DIRS AND DEFINED CUFORGE_TORCH_LIBRARY_DIR
   AND DEFINED CUFORGE_TORCH_CXX11_ABI AND DEFINED CUFORGE_TORCH_VERSION)
  # cuforge passes what its env check already read from this interpreter: no second import
  set(TORCH_INCLUDE_DIRS "${CUFORGE_TORCH_INCLUDE_DIRS}")
  set(TORCH_LIBRARY_DIR "${CUFORGE_TORCH_LIBRARY_DIR}")
else()
  execute_process(
    COMMAND "${Python_EXECUTABLE}" -c
      "import os, torch, torch.utils.cpp_extension as e; \
print('inc=' + ';'.join(e.include_paths())); \
print('lib=' + os.path.join(os.path.dirname(torch.__file__), 'lib')); \
print('abi=%d' % torch._C._GLIBCXX_USE_CXX11_ABI); \
print('ver=' + torch.__version__)"
    OUTPUT_VARIABLE _cuforge_torch
    RESULT_VARIABLE _cuforge_rc
    ERROR_VARIABLE _cuforge_err)
  if(NOT _cuforge_rc EQUAL 0)
    message(FATAL_ERROR "cuforge: cannot import torch with ${Python_EXECUTABLE}:\n${_cuforge_err}\n"
                        "Build inside the combo env (nox -s build-...) or pass -DPython_EXECUTABLE.")
  endif()
  function(_cuforge_field key out)
    string(REGEX MATCH "${key}=([^\n]*)" _m "${_cuforge_torch}")
    set(${out} "${CMAKE_MATCH_1}" PARENT_SCOPE)
  endfunction()
  _cuforge_field(inc TORCH_INCLUDE_DIRS)
  _cuforge_field(lib TORCH_LIBRARY_DIR)
  _cuforge_field(abi CUFORGE_TORCH_CXX11_ABI)
  _cuforge_field(ver CUFORGE_TORCH_VERSION)
endif()
# torch >= 2.10 headers need C++20
string(REGEX MATCH "^[0-9]+\\.[0-9]+" _cuforge_torch_mm "${CUFORGE_TORCH_VERSION}")
if(_cuforge_torch_mm VERSION_GREATER_EQUAL 2.10)
  set(CUFORGE_TORCH_CXX_STANDARD 20)
else()
  set(CUFORGE_TORCH_CXX_STANDARD 17)
endif()
message(STATUS "cuforge: torch ${CUFORGE_TORCH_VERSION}, C++${CUFORGE_TORCH_CXX_STANDARD}, "
               "_GLIBCXX_USE_CXX11_ABI=${CUFORGE_TORCH_CXX11_ABI}, CUDA arches ${CMAKE_CUDA_ARCHITECTURES}")

foreach(_name c10 torch torch_cpu torch_python)
  find_library(CUFORGE_LIB_${_name} NAMES ${_name} PATHS "${TORCH_LIBRARY_DIR}" NO_DEFAULT_PATH REQUIRED)
endforeach()

# cuforge_add_torch_extension(<target> SOURCES <files...>): a Python extension module linked
# against torch, with torch's ABI and C++ standard; .cu files get the CUDA arches.
function(cuforge_add_torch_extension target)
  cmake_parse_arguments(ARG "" "" "SOURCES" ${ARGN})
  Python_add_library(${target} MODULE WITH_SOABI ${ARG_SOURCES})
  target_include_directories(${target} PRIVATE ${TORCH_INCLUDE_DIRS})
  target_link_libraries(${target} PRIVATE ${CUFORGE_LIB_c10} ${CUFORGE_LIB_torch}
                        ${CUFORGE_LIB_torch_cpu} ${CUFORGE_LIB_torch_python})
  target_compile_definitions(${target} PRIVATE
    _GLIBCXX_USE_CXX11_ABI=${CUFORGE_TORCH_CXX11_ABI} TORCH_EXTENSION_NAME=${target})
  set_target_properties(${target} PROPERTIES
    CXX_STANDARD ${CUFORGE_TORCH_CXX_STANDARD} CXX_STANDARD_REQUIRED ON
    CUDA_STANDARD 17 CUDA_RUNTIME_LIBRARY Static POSITION_INDEPENDENT_CODE ON)
endfunction()
