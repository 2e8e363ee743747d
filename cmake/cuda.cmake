# cuda.cmake - the CUDA engine (included by the top-level CMakeLists.txt when SDM_ENABLE_CUDA=ON).
#
#   sdm_cuda         static library part from src/cuda/<job>/ (kernels + host launchers)
#   sdm_cuda_topk    the product-key top-k kernels (src/cuda/topk), linked by sdm_cuda
#   tests/gpu        GPU tests and, in bench/cuda, the GPU benchmark (SDM_BUILD_GPU_TESTS, default
#                    ON); they need no GoogleTest and exit 0 with a message where no GPU exists.
#
# SDM_CUDA_ARCHS picks the architectures (CMAKE_CUDA_ARCHITECTURES syntax, default 90 = H100/H200).
set(SDM_CUDA_ARCHS "90" CACHE STRING "CUDA architectures of the kernels (e.g. 90, 90;100)")
option(SDM_BUILD_GPU_TESTS "Build the GPU tests (tests/gpu) and the GPU benchmark (bench/cuda)" ON)

set(CMAKE_CUDA_ARCHITECTURES ${SDM_CUDA_ARCHS})
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
# C++20 for .cu files. CMake < 3.26 does not know nvcc's C++20 flag: tell it.
if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
endif()
set(CMAKE_CUDA_STANDARD 20)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(CMAKE_CUDA_EXTENSIONS OFF)

# sdm_set_cuda_warnings(target): host-side warnings of .cu files, device-side warnings as errors
# under SDM_WERROR.
function(sdm_set_cuda_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra -lineinfo>)
  if(SDM_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>)
  endif()
endfunction()

# The product-key top-k kernels: their own part, so their GPU test and benchmark build without
# the rest of the engine.
sdm_add_part(sdm_cuda_topk src/cuda/topk/*.cu)
target_link_libraries(sdm_cuda_topk PUBLIC sdm_core CUDA::cudart)
sdm_set_cuda_warnings(sdm_cuda_topk)

# One folder per job (docs/cuda.md, "Layout"); topk/ is its own part above.
sdm_add_part(sdm_cuda src/cuda/common/*.cu src/cuda/sort/*.cu src/cuda/forward/*.cu src/cuda/saved/*.cu
             src/cuda/backward/*.cu src/cuda/decode/*.cu)
target_link_libraries(sdm_cuda PUBLIC sdm_core sdm_cuda_topk CUDA::cudart)
sdm_set_cuda_warnings(sdm_cuda)

if(SDM_BUILD_GPU_TESTS)
  add_subdirectory(${PROJECT_SOURCE_DIR}/tests/gpu ${PROJECT_BINARY_DIR}/tests/gpu)
  add_subdirectory(${PROJECT_SOURCE_DIR}/bench/cuda ${PROJECT_BINARY_DIR}/bench/cuda)
  add_subdirectory(${PROJECT_SOURCE_DIR}/tests/gpu_topk ${PROJECT_BINARY_DIR}/tests/gpu_topk)
  add_subdirectory(${PROJECT_SOURCE_DIR}/bench/topk ${PROJECT_BINARY_DIR}/bench/topk)
endif()
