# The Python package `gradmesh.torch`: gradmesh's collectives as a
# torch.distributed backend (docs/pytorch.md). Built into
# <build>/python/gradmesh/, importable with PYTHONPATH=<build>/python, where
# Debian's PyTorch C++ headers (libtorch-dev), pybind11 (pybind11-dev) and
# Python's headers (python3-dev) are installed: `make python` installs them,
# and so does `make test`. Not in the sanitizer builds: a sanitized module
# cannot be loaded into an uninstrumented Python.
set(GRADMESH_TORCH_PYTHON /usr/bin/python3 CACHE FILEPATH "The Python whose PyTorch the backend is built for")
set(GRADMESH_PYTHON_DIR ${CMAKE_BINARY_DIR}/python)
set(GRADMESH_PYTHON_BUILT OFF)

find_path(GRADMESH_TORCH_C10D_INCLUDE torch/csrc/distributed/c10d/ProcessGroup.hpp)
find_path(GRADMESH_PYBIND11_INCLUDE pybind11/pybind11.h)
find_library(GRADMESH_TORCH_PYTHON_LIB torch_python)
set(missing "")
if(NOT GRADMESH_SANITIZER MATCHES "^(off|no|false|0|)$")
  set(missing "a sanitizer build")
elseif(NOT GRADMESH_TORCH_C10D_INCLUDE OR NOT GRADMESH_TORCH_PYTHON_LIB)
  set(missing "libtorch-dev")
elseif(NOT GRADMESH_PYBIND11_INCLUDE)
  set(missing "pybind11-dev")
elseif(NOT EXISTS ${GRADMESH_TORCH_PYTHON})
  set(missing "${GRADMESH_TORCH_PYTHON}")
endif()
if(NOT missing)
  execute_process(COMMAND ${GRADMESH_TORCH_PYTHON} -c
                  "import sysconfig; print(sysconfig.get_paths()['include']); print(sysconfig.get_config_var('EXT_SUFFIX'))"
                  OUTPUT_VARIABLE python_facts OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE python_status)
  string(REPLACE "\n" ";" python_facts "${python_facts}")
  list(GET python_facts 0 python_include)
  list(GET python_facts 1 python_suffix)
  if(NOT python_status EQUAL 0 OR NOT EXISTS ${python_include}/Python.h)
    set(missing "python3-dev")
  endif()
endif()

if(missing)
  message(STATUS "gradmesh.torch (the torch.distributed backend) not built: ${missing}")
else()
  set(GRADMESH_PYTHON_BUILT ON)
  # Linked into a shared module: the library's code must be position
  # independent. Without semantic interposition the compiler still inlines
  # and calls the library's own functions directly, as in a non-PIC build.
  set_target_properties(gradmesh_lib PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_compile_options(gradmesh_lib PRIVATE -fno-semantic-interposition)
  file(GLOB GRADMESH_TORCH_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/gradmesh/pytorch/*.cc)
  add_library(gradmesh_torch MODULE ${GRADMESH_TORCH_SOURCES})
  set_target_properties(gradmesh_torch PROPERTIES
    OUTPUT_NAME _C PREFIX "" SUFFIX "${python_suffix}"
    LIBRARY_OUTPUT_DIRECTORY ${GRADMESH_PYTHON_DIR}/gradmesh/torch
    CXX_VISIBILITY_PRESET hidden
    # PyTorch's headers are most of each file's compile: one batch parses them once.
    UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 0)
  target_include_directories(gradmesh_torch SYSTEM PRIVATE ${python_include} ${GRADMESH_TORCH_C10D_INCLUDE}/torch/csrc/api/include)
  target_compile_options(gradmesh_torch PRIVATE ${GRADMESH_WARNINGS})
  # --as-needed: only the shared libraries this module calls are loaded into
  # the script's Python (not the serving stack's gRPC or SentencePiece);
  # --exclude-libs: the library's symbols stay inside the module.
  target_link_options(gradmesh_torch PRIVATE -Wl,--as-needed -Wl,--exclude-libs,ALL)
  target_link_libraries(gradmesh_torch PRIVATE gradmesh_lib ${GRADMESH_TORCH_PYTHON_LIB} torch torch_cpu c10)
  # The package's Python files, copied beside the module (an edit re-runs configure).
  file(GLOB_RECURSE python_files RELATIVE ${CMAKE_SOURCE_DIR}/python CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/python/*.py)
  foreach(f ${python_files})
    configure_file(${CMAKE_SOURCE_DIR}/python/${f} ${GRADMESH_PYTHON_DIR}/${f} COPYONLY)
  endforeach()
endif()
