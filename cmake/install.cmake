# install.cmake - `cmake --install <build> --prefix <dir>`: the C++ library as a CMake package.
#
#   <dir>/include/sdm/*.hpp                 the public headers (#include <sdm/sdm.hpp>)
#   <dir>/lib/libsdm_*.a                    the library parts (static; the CUDA ones with SDM_ENABLE_CUDA)
#   <dir>/lib/cmake/sdm/                    sdmConfig.cmake, its version file and the exported targets
#
# A consumer: find_package(sdm 0.1 REQUIRED) and target_link_libraries(app PRIVATE sdm::sdm);
# tests/install/ is one, built and run against an installed tree by scripts/test_install.sh
# (part of `make test`). SDM_INSTALL_CPP=OFF (the Python package's build) installs none of it.
option(SDM_INSTALL_CPP "Install the C++ headers, libraries and CMake package" ON)
if(NOT SDM_INSTALL_CPP)
  return()
endif()

include(CMakePackageConfigHelpers)
set(sdm_installed_parts sdm_core sdm_reference sdm_cpu_engine sdm_ops)
if(SDM_ENABLE_CUDA)
  list(APPEND sdm_installed_parts sdm_cuda_topk sdm_cuda)
endif()
install(TARGETS sdm ${sdm_installed_parts} EXPORT sdmTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/sdm DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
set(sdm_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/sdm)
install(EXPORT sdmTargets NAMESPACE sdm:: DESTINATION ${sdm_cmake_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/sdmConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/sdmConfig.cmake INSTALL_DESTINATION ${sdm_cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/sdmConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/sdmConfig.cmake ${PROJECT_BINARY_DIR}/sdmConfigVersion.cmake
        DESTINATION ${sdm_cmake_dir})
