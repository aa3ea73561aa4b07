# `cmake --install`: the library as a package other projects build against.
#
#   <prefix>/include/gradmesh/...            the public headers (gradmesh/gradmesh.h and what it includes) and config.h
#   <prefix>/lib/libgradmesh.a               the library (static only)
#   <prefix>/bin/gradmesh                    the executable (`gradmesh launch` starts the workers)
#   <prefix>/lib/cmake/gradmesh/             find_package(gradmesh) -> gradmesh::gradmesh
#   <prefix>/lib/pkgconfig/gradmesh.pc       pkg-config --cflags --libs gradmesh
#
# Both descriptions are relocatable: `cmake --install build --prefix P` may
# pick any P after configuring. The tests are never installed. docs/library.md
# is the user's side of this file.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(GRADMESH_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/gradmesh)
set(GRADMESH_PKGCONFIG_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# The public headers are C++20; consumers get the standard from the target.
target_compile_features(gradmesh_lib PUBLIC cxx_std_20)
set_target_properties(gradmesh_lib PROPERTIES EXPORT_NAME gradmesh)

install(TARGETS gradmesh_lib EXPORT gradmeshTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS gradmesh RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The public API is gradmesh/gradmesh.h and every gradmesh header it reaches,
# found by following the includes at configure time: a header that is not
# reachable (the trainer, the launcher, the backends' internals, which pull
# in Gloo or MPI) is not installed, and a new include in a public header
# installs its target with it. config.h is generated (installed below).
set(GRADMESH_PUBLIC_HEADERS "")
set(pending gradmesh/gradmesh.h)
while(pending)
  list(POP_FRONT pending header)
  if(header IN_LIST GRADMESH_PUBLIC_HEADERS OR NOT EXISTS ${CMAKE_SOURCE_DIR}/src/${header})
    continue()
  endif()
  list(APPEND GRADMESH_PUBLIC_HEADERS ${header})
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/${header})
  file(STRINGS ${CMAKE_SOURCE_DIR}/src/${header} includes REGEX "^#include \"gradmesh/[^\"]+\"")
  foreach(line IN LISTS includes)
    string(REGEX REPLACE "^#include \"([^\"]+)\".*" "\\1" included "${line}")
    list(APPEND pending ${included})
  endforeach()
endwhile()
foreach(header IN LISTS GRADMESH_PUBLIC_HEADERS)
  get_filename_component(dir ${header} DIRECTORY)
  install(FILES ${CMAKE_SOURCE_DIR}/src/${header} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/${dir})
endforeach()
install(FILES ${CMAKE_BINARY_DIR}/generated/gradmesh/config.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/gradmesh)

install(EXPORT gradmeshTargets NAMESPACE gradmesh:: DESTINATION ${GRADMESH_CMAKE_DIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/gradmeshConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/package/gradmeshConfig.cmake
                              INSTALL_DESTINATION ${GRADMESH_CMAKE_DIR}
                              PATH_VARS CMAKE_INSTALL_BINDIR)
# 0.x: a minor release may change the API, so only patch releases are compatible.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/package/gradmeshConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/package/gradmeshConfig.cmake ${CMAKE_BINARY_DIR}/package/gradmeshConfigVersion.cmake
        DESTINATION ${GRADMESH_CMAKE_DIR})

# pkg-config: the prefix is found from the .pc file's own place (${pcfiledir}),
# so the file stays right wherever --prefix put it. Gloo and MPI have no
# pkg-config module the build used, so their libraries are named by the
# paths CMake linked the executable with.
file(RELATIVE_PATH GRADMESH_PC_TO_PREFIX ${CMAKE_INSTALL_PREFIX}/${GRADMESH_PKGCONFIG_DIR} ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" GRADMESH_PC_TO_PREFIX "${GRADMESH_PC_TO_PREFIX}")
set(GRADMESH_PC_MPI_LIBS "")
foreach(lib IN LISTS MPI_CXX_LIBRARIES)
  string(APPEND GRADMESH_PC_MPI_LIBS " ${lib}")
endforeach()
configure_file(${CMAKE_CURRENT_LIST_DIR}/gradmesh.pc.in ${CMAKE_BINARY_DIR}/package/gradmesh.pc.in @ONLY)
file(GENERATE OUTPUT ${CMAKE_BINARY_DIR}/package/gradmesh.pc INPUT ${CMAKE_BINARY_DIR}/package/gradmesh.pc.in)
install(FILES ${CMAKE_BINARY_DIR}/package/gradmesh.pc DESTINATION ${GRADMESH_PKGCONFIG_DIR})
