// digest.hpp - bitwise fingerprints of large buffers for the GPU benchmark's --digest (two builds
// that must agree bitwise print the same values): a 64-bit FNV-1a hash of each 1 MiB block
// (the last one shorter), computed on the host's threads, then FNV-1a over the blocks' hashes (8
// little-endian bytes each). The same bytes give the same value whatever the
// thread count or the pieces the bytes arrive in (every piece but the last a whole number of
// blocks); any changed bit, moved block or other length gives another value but for hash
// collisions. (Before stop 33 the digest was one FNV-1a over all bytes: values differ from the
// ones recorded earlier; with it a flagship training row took about 50 s of the device's time,
// against about 3 s without --digest, most of it hashing the 9 GB saved buffer byte by byte, twice.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sdm::bench {

class BlockDigest {
 public:
  static constexpr std::size_t kBlockBytes = std::size_t{1} << 20;

  // Adds the next `bytes` bytes. Throws std::logic_error when an earlier piece was not a whole
  // number of blocks (its last block would be cut). threads = 0: the host's hardware threads.
  void add(const unsigned char* data, std::size_t bytes, unsigned threads = 0);
  std::uint64_t value() const;

 private:
  std::vector<std::uint64_t> blocks_;
  bool closed_ = false;  // a piece ended inside a block
};

// FNV-1a over the digests' bytes in order (a digest of several tensors from theirs).
std::uint64_t combine_digests(const std::vector<std::uint64_t>& digests);

}  // namespace sdm::bench
