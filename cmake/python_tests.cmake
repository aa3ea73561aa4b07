# tests/pytorch: the torch.distributed backend from real PyTorch processes.
# One CTest test per `def test_<name>` in each file: PyTorch.<Name> (test_a_b:
# PyTorch.AB, as the C++ tests are named). The
# 3-rank operation matrix runs again over the gloo and hier transports.
if(NOT GRADMESH_SANITIZER MATCHES "^(off|no|false|0|)$")
  return()  # a sanitized module cannot load into Python (python_package.cmake)
endif()
if(NOT GRADMESH_PYTHON_BUILT)
  # A Release build without PyTorch's headers says so instead of passing
  # without the tests (the sanitizer builds skip the layer: python_package.cmake).
  add_test(NAME PyTorch.BackendIsBuilt COMMAND ${CMAKE_COMMAND} -E echo
           "gradmesh.torch was not built: ${missing}; run `make python` or scripts/install-deps.sh --test")
  set_tests_properties(PyTorch.BackendIsBuilt PROPERTIES WILL_FAIL ON)
  return()
endif()
set(python_test_env "PYTHONPATH=${GRADMESH_PYTHON_DIR}:${CMAKE_SOURCE_DIR}/tests/pytorch" "GRADMESH_DEBUG=WARN"
    "GRADMESH_BINARY=$<TARGET_FILE:gradmesh>"
    "OMP_NUM_THREADS=1" "PYTHONWARNINGS=ignore::UserWarning")
file(GLOB python_tests CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/pytorch/test_*.py)
foreach(file ${python_tests})
  file(STRINGS ${file} defs REGEX "^def test_[a-z0-9_]+\\(")
  foreach(def ${defs})
    string(REGEX REPLACE "^def test_([a-z0-9_]+)\\(.*" "\\1" name "${def}")
    string(REPLACE "_" ";" words "${name}")
    set(camel "")
    foreach(word ${words})
      string(SUBSTRING "${word}" 0 1 first)
      string(SUBSTRING "${word}" 1 -1 rest)
      string(TOUPPER "${first}" first)
      string(APPEND camel "${first}${rest}")
    endforeach()
    add_test(NAME PyTorch.${camel} COMMAND ${GRADMESH_TORCH_PYTHON} ${file} ${name} WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
    set_tests_properties(PyTorch.${camel} PROPERTIES ENVIRONMENT "${python_test_env}" TIMEOUT 300)
  endforeach()
endforeach()
foreach(transport gloo hier)
  add_test(NAME PyTorch.EveryOperationOn3RanksOver${transport}
           COMMAND ${GRADMESH_TORCH_PYTHON} ${CMAKE_SOURCE_DIR}/tests/pytorch/test_collectives.py every_operation_on_3_ranks)
  set_tests_properties(PyTorch.EveryOperationOn3RanksOver${transport} PROPERTIES
                       ENVIRONMENT "${python_test_env};GRADMESH_BACKEND=${transport}" TIMEOUT 300)
endforeach()
# The package from the build tree alone, in a fresh interpreter started outside it.
add_test(NAME PyTorch.ImportsFromTheBuildTree COMMAND ${GRADMESH_TORCH_PYTHON} -c
         "import gradmesh.torch, torch.distributed as d; assert 'GRADMESH' in d.Backend._plugins; assert gradmesh.torch.__file__.startswith('${GRADMESH_PYTHON_DIR}/'), gradmesh.torch.__file__; print(gradmesh.torch.__file__)"
         WORKING_DIRECTORY /)
set_tests_properties(PyTorch.ImportsFromTheBuildTree PROPERTIES ENVIRONMENT "PYTHONPATH=${GRADMESH_PYTHON_DIR}")
