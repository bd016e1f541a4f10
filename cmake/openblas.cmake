# OpenBLAS, the build that threads with OpenMP. colrow's own element-wise
# kernels use OpenMP; with the pthreads build of OpenBLAS a rank would run two
# thread pools whose idle threads spin on the cores the other pool needs
# (measured in docs/performance.md). Debian ships both builds side by side;
# we link the OpenMP one by path, and the loader finds it through RPATH (its
# soname, libopenblas.so.0, is shared with the default pthreads build).
# Override with -DCOLROW_OPENBLAS_LIBRARY=... -DCOLROW_OPENBLAS_INCLUDE_DIR=...
find_library(COLROW_OPENBLAS_LIBRARY openblas
  PATHS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp NO_DEFAULT_PATH
  DOC "OpenBLAS library to link (default: Debian's OpenMP build)")
find_path(COLROW_OPENBLAS_INCLUDE_DIR cblas.h
  PATHS /usr/include/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp NO_DEFAULT_PATH
  DOC "Directory holding that OpenBLAS's cblas.h")
if(NOT COLROW_OPENBLAS_LIBRARY OR NOT COLROW_OPENBLAS_INCLUDE_DIR)
  message(FATAL_ERROR "[build] OpenBLAS built with OpenMP was not found. "
          "Install it with: apt-get install libopenblas-openmp-dev "
          "(or pass -DCOLROW_OPENBLAS_LIBRARY=... -DCOLROW_OPENBLAS_INCLUDE_DIR=...).")
endif()
message(STATUS "OpenBLAS: ${COLROW_OPENBLAS_LIBRARY}")
set(BLAS_LIBRARIES ${COLROW_OPENBLAS_LIBRARY})
set(OPENBLAS_INCLUDE_DIR ${COLROW_OPENBLAS_INCLUDE_DIR})
# Installed binaries keep finding the OpenMP build rather than the default one.
set(CMAKE_INSTALL_RPATH_USE_LINK_PATH ON)
