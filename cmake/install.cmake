# Installs libcolrow, its public headers and a CMake package, so a downstream
# project can find_package(colrow) and link colrow::colrow (see examples/downstream).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS colrow_lib EXPORT colrowTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS colrow RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/colrow DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT colrowTargets NAMESPACE colrow:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/colrow)
configure_package_config_file(cmake/colrowConfig.cmake.in
  ${PROJECT_BINARY_DIR}/colrowConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/colrow)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/colrowConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/colrowConfig.cmake ${PROJECT_BINARY_DIR}/colrowConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/colrow)
