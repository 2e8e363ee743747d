// async_copy.cuh - cp.async (sm_80+): copies from global to shared memory that run while the
// thread goes on, in commit groups it waits for. A copy's bytes are visible to the copying thread
// after its wait; to other threads only after a barrier (or a __syncwarp for the warp's lanes).
// The zero-filling copies of the chunk products are chunk_products.cuh's copy_async16 / copy_async4.
#pragma once

namespace sdm::cuda {

// One cp.async of kBytes (4, 8, 16 or 32: two 16-byte copies) from global to shared memory; 16 and
// 32 bytes bypass L1 (.cg).
template <int kBytes>
__device__ __forceinline__ void copy_async(void* shared, const void* global) {
  static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16 || kBytes == 32, "cp.async copies 4, 8, 16 or 32 bytes");
  const auto to = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  if constexpr (kBytes == 32) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(to), "l"(global) : "memory");
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(to + 16),
                 "l"(static_cast<const unsigned char*>(global) + 16) : "memory");
  } else if constexpr (kBytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(to), "l"(global) : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(to), "l"(global), "n"(kBytes) : "memory");
  }
}

// Closes this thread's current group of copies.
__device__ __forceinline__ void commit_async_copies() { asm volatile("cp.async.commit_group;" ::: "memory"); }

// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void wait_async_groups() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

}  // namespace sdm::cuda
