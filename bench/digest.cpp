// digest.cpp - BlockDigest (digest.hpp).
#include "digest.hpp"

#include <algorithm>
#include <stdexcept>
#include <thread>

namespace sdm::bench {
namespace {

constexpr std::uint64_t kFnvBasis = 0xcbf29ce484222325ull;
constexpr std::uint64_t kFnvPrime = 0x100000001b3ull;

std::uint64_t fnv1a(const unsigned char* data, std::size_t bytes) {
  std::uint64_t h = kFnvBasis;
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ data[i]) * kFnvPrime;
  return h;
}

std::uint64_t fnv1a_word(std::uint64_t word, std::uint64_t h) {
  for (int k = 0; k < 8; ++k) h = (h ^ ((word >> (8 * k)) & 0xffu)) * kFnvPrime;
  return h;
}

}  // namespace

void BlockDigest::add(const unsigned char* data, std::size_t bytes, unsigned threads) {
  if (closed_) throw std::logic_error("BlockDigest::add: an earlier piece ended inside a block");
  const std::size_t count = (bytes + kBlockBytes - 1) / kBlockBytes, first = blocks_.size();
  blocks_.resize(first + count);
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  const std::size_t workers = std::min<std::size_t>(threads, count);
  const auto hash_blocks = [&](std::size_t w) {
    for (std::size_t b = w; b < count; b += workers) {
      const std::size_t begin = b * kBlockBytes, end = std::min(bytes, begin + kBlockBytes);
      blocks_[first + b] = fnv1a(data + begin, end - begin);
    }
  };
  std::vector<std::thread> pool;
  for (std::size_t w = 1; w < workers; ++w) pool.emplace_back(hash_blocks, w);
  if (workers > 0) hash_blocks(0);
  for (std::thread& t : pool) t.join();
  closed_ = bytes % kBlockBytes != 0;
}

std::uint64_t BlockDigest::value() const { return combine_digests(blocks_); }

std::uint64_t combine_digests(const std::vector<std::uint64_t>& digests) {
  std::uint64_t h = kFnvBasis;
  for (const std::uint64_t d : digests) h = fnv1a_word(d, h);
  return h;
}

}  // namespace sdm::bench
