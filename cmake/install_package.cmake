# `cmake --install`: the library as a package other projects build against.
#
#   <prefix>/include/gradmesh/...            the headers (gradmesh/gradmesh.h is the umbrella) and config.h
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
# Every layer's headers except the executable's own (cli/, bench/) and the
# build-time stand-in for a Gloo header Debian does not ship (comm/gloo/compat/,
# which must never shadow a real Gloo install on a consumer's include path).
install(DIRECTORY ${CMAKE_SOURCE_DIR}/src/gradmesh/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/gradmesh
        FILES_MATCHING PATTERN "*.h"
        PATTERN "cli" EXCLUDE
        PATTERN "bench" EXCLUDE
        PATTERN "compat" EXCLUDE)
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
