# colrow_add_test(name source [NP n1 n2 ...])
# Builds one GoogleTest binary and registers it once per process count: NP 1
# runs it as a plain process, larger counts under mpirun (label multirank,
# the suite tcp_namespaces_test.sh also runs across two nodes). Every run has
# a timeout, so a deadlock fails the test instead of hanging CI.
set(COLROW_MPI_TEST_ENV
  "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_mpi_yield_when_idle=1;OMPI_MCA_btl_vader_single_copy_mechanism=none;OMPI_MCA_rmaps_base_oversubscribe=1;OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
set(COLROW_TEST_TIMEOUT 120 CACHE STRING "Seconds before a test run counts as hung")
# Slower builds (the sanitizers: scripts/sanitize.sh sets 4) scale every
# test's timeout, the CLI tests' own included.
set(COLROW_TEST_TIMEOUT_SCALE 1 CACHE STRING "Factor on every test's timeout")

function(colrow_add_test name source)
  cmake_parse_arguments(ARG "" "" "NP" ${ARGN})
  if(NOT ARG_NP)
    set(ARG_NP 1)
  endif()
  add_executable(${name} ${source})
  target_link_libraries(${name} PRIVATE colrow_test_support)
  foreach(np IN LISTS ARG_NP)
    if(np EQUAL 1)
      add_test(NAME ${name} COMMAND $<TARGET_FILE:${name}>)
    else()
      add_test(NAME ${name}_np${np}
               COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --oversubscribe
                       --bind-to none ${MPIEXEC_PREFLAGS} $<TARGET_FILE:${name}> ${MPIEXEC_POSTFLAGS})
      set(test_name ${name}_np${np})
    endif()
    if(np EQUAL 1)
      set(test_name ${name})
    endif()
    math(EXPR timeout "${COLROW_TEST_TIMEOUT} * ${COLROW_TEST_TIMEOUT_SCALE}")
    set_tests_properties(${test_name} PROPERTIES TIMEOUT ${timeout}
                         ENVIRONMENT "${COLROW_MPI_TEST_ENV}" PROCESSORS ${np})
    if(NOT np EQUAL 1)
      set_property(TEST ${test_name} APPEND PROPERTY LABELS multirank)
    endif()
  endforeach()
endfunction()

# colrow_add_gpu_test(name source [NP n1 n2 ...])
# A test of the CUDA backend: built only with it (it calls kernels/cuda
# directly), labelled `gpu` (ctest -L gpu runs the GPU suite), and reported by
# ctest as skipped, not passed, when it finds no GPU: every test body starts
# with COLROW_REQUIRE_GPU(), which prints "GPU test skipped: <why>".
function(colrow_add_gpu_test name source)
  if(NOT COLROW_WITH_CUDA)
    return()
  endif()
  colrow_add_test(${name} ${source} ${ARGN})
  target_link_libraries(${name} PRIVATE CUDA::cudart)
  cmake_parse_arguments(ARG "" "" "NP" ${ARGN})
  if(NOT ARG_NP)
    set(ARG_NP 1)
  endif()
  foreach(np IN LISTS ARG_NP)
    set(test_name ${name})
    if(NOT np EQUAL 1)
      set(test_name ${name}_np${np})
    endif()
    set_property(TEST ${test_name} APPEND PROPERTY LABELS gpu)
    set_tests_properties(${test_name} PROPERTIES SKIP_REGULAR_EXPRESSION "GPU test skipped")
  endforeach()
endfunction()

# colrow_add_emulated_test(name source [more sources ...])
# A test whose CUDA kernels run on the CPU through tests/support/warp_emulation
# (COLROW_WARP_EMULATION): built wherever the CUDA toolkit's headers are, the
# kernels' headers compiled for the host (with or without the CUDA backend:
# the sanitizer build has none), and run everywhere, GPU or not (no `gpu`
# label). Listed in the global property COLROW_EMULATED_TESTS.
# The kernels' `#pragma unroll` is nvcc's, which a host compiler ignores, and
# they read vectors through casts, as nvcc allows (-fno-strict-aliasing). No
# multiply-add is fused that the kernels do not spell (-ffp-contract=off), so
# __fmul_rn and __fadd_rn keep their one rounding.
function(colrow_add_emulated_test name source)
  if(NOT COLROW_WITH_WARP_EMULATION)
    return()
  endif()
  if(NOT TARGET colrow_warp_emulation)
    # The emulation itself, compiled once for every emulated test.
    add_library(colrow_warp_emulation STATIC ${PROJECT_SOURCE_DIR}/tests/support/warp_emulation.cpp)
    target_link_libraries(colrow_warp_emulation PUBLIC colrow_test_support)
    target_compile_definitions(colrow_warp_emulation PUBLIC COLROW_WARP_EMULATION)
    target_compile_options(colrow_warp_emulation PUBLIC -Wno-unknown-pragmas -fno-strict-aliasing
                                                        -ffp-contract=off)
    target_include_directories(colrow_warp_emulation PUBLIC ${CUDAToolkit_INCLUDE_DIRS})
  endif()
  colrow_add_test(${name} ${source})
  target_sources(${name} PRIVATE ${ARGN})
  target_link_libraries(${name} PRIVATE colrow_warp_emulation)
  set_property(GLOBAL APPEND PROPERTY COLROW_EMULATED_TESTS ${name})
endfunction()

# colrow_add_cli_test(name script timeout [arg ...])
# An end-to-end test of the colrow binary: tests/cli/<script> run with the
# binary, mpiexec and the extra args, under the MPI test environment, killed
# after `timeout` seconds; labelled multirank, as it launches ranks through
# mpiexec. More properties: set_tests_properties(name ...).
function(colrow_add_cli_test name script timeout)
  add_test(NAME ${name}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cli/${script} $<TARGET_FILE:colrow>
                   ${MPIEXEC_EXECUTABLE} ${ARGN})
  math(EXPR timeout "${timeout} * ${COLROW_TEST_TIMEOUT_SCALE}")
  set_tests_properties(${name} PROPERTIES TIMEOUT ${timeout}
                       ENVIRONMENT "${COLROW_MPI_TEST_ENV}" LABELS multirank)
endfunction()
