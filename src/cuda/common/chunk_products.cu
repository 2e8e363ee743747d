// chunk_products.cu - the chunk products' test knob (chunk_products.hpp).
#include "cuda/common/chunk_products.hpp"

#include <atomic>

namespace sdm::cuda {
namespace {

std::atomic<bool> blockwise{false};

}  // namespace

bool blockwise_chunk_products() { return blockwise.load(std::memory_order_relaxed); }
void set_blockwise_chunk_products(bool on) { blockwise.store(on, std::memory_order_relaxed); }

}  // namespace sdm::cuda
