# The CUDA backend, a configure option: COLROW_CUDA=AUTO (the default) builds
# it when nvcc, the CUDA runtime, cuBLAS and NCCL are found, ON requires them,
# OFF leaves a CPU-only build (kernels/no_cuda, core/no_cuda, dist/no_nccl
# answer every GPU request with a clear error). Code is compiled for sm_90
# (Hopper) with compute_90 PTX beside it, so newer GPUs JIT it and CI, which
# has the toolkit but no GPU, keeps it compiling.
set(COLROW_CUDA AUTO CACHE STRING "Build the CUDA backend: AUTO, ON or OFF")
set_property(CACHE COLROW_CUDA PROPERTY STRINGS AUTO ON OFF)

set(COLROW_WITH_CUDA OFF)
if(NOT COLROW_CUDA STREQUAL "OFF")
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)  # the toolkit's default home, off PATH
  endif()
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    # "90" = sm_90 machine code + compute_90 PTX. Set before enable_language:
    # CMake's own default (sm_52) is refused by CUDA 13.
    set(CMAKE_CUDA_ARCHITECTURES 90)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    find_package(CUDAToolkit)
    find_library(COLROW_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
    find_path(COLROW_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
    if(CUDAToolkit_FOUND AND TARGET CUDA::cublas AND COLROW_NCCL_LIBRARY AND COLROW_NCCL_INCLUDE_DIR)
      set(COLROW_WITH_CUDA ON)
    endif()
  endif()
  if(NOT COLROW_WITH_CUDA AND COLROW_CUDA STREQUAL "ON")
    message(FATAL_ERROR "[build] COLROW_CUDA=ON but nvcc, cuBLAS or NCCL was not found. Install "
            "the CUDA toolkit (/usr/local/cuda) with NCCL, or configure with -DCOLROW_CUDA=OFF.")
  endif()
endif()
if(COLROW_WITH_CUDA)
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  message(STATUS "CUDA backend: on (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, architectures "
                 "${CMAKE_CUDA_ARCHITECTURES}, NCCL ${COLROW_NCCL_LIBRARY})")
else()
  message(STATUS "CUDA backend: off (CPU-only build; --device cuda will say so)")
endif()

# The warp emulation (tests/support/warp_emulation.h) runs the CUDA kernels'
# headers on the host, so its tests need only the toolkit's headers
# (cuda_bf16.h, cuda_runtime.h's types): a CPU-only build, the sanitizer's
# among them, builds and runs them wherever the toolkit is installed.
set(COLROW_WITH_WARP_EMULATION ${COLROW_WITH_CUDA})
if(NOT COLROW_WITH_CUDA)
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    set(COLROW_WITH_WARP_EMULATION ON)
  endif()
endif()
