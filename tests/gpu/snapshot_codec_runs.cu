// snapshot_codec_runs.cu - device runs of the CUDA snapshot codec for the GPU tests (see
// snapshot_codec_runs.hpp). The kernels call the engine's own device functions
// (src/cuda/saved/snapshot_rows.cuh) in the way the writer and the backward call them.
#include "snapshot_codec_runs.hpp"

#include <cuda_runtime.h>

#include <cstring>

#include "cuda/saved/snapshot_rows.cuh"
#include "device_tensor.hpp"

namespace sdm::testing {
namespace {

using cuda::Bf16Bits;
using cuda::kLaneCols;
using cuda::PackedRow;
using cuda::SnapshotRows;
using cuda::SnapshotScale;

// A device buffer of `bytes` bytes, freed on scope exit.
class Buffer {
 public:
  explicit Buffer(std::size_t bytes) { cuda_ok(cudaMalloc(&data_, bytes == 0 ? 1 : bytes), "cudaMalloc"); }
  ~Buffer() { cudaFree(data_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* get() const { return data_; }

 private:
  void* data_ = nullptr;
};

void upload(const Buffer& dst, const void* src, std::size_t bytes) {
  cuda_ok(cudaMemcpy(dst.get(), src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
}
void download(void* dst, const Buffer& src, std::size_t bytes) {
  cuda_ok(cudaMemcpy(dst, src.get(), bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
}
void finish(const char* what) {
  cuda_ok(cudaGetLastError(), what);
  cuda_ok(cudaDeviceSynchronize(), what);
}

// Grid (warps, scales): each warp encodes pieces of 32 * kVec columns as the writer does, row
// blockIdx.y with scale scales[blockIdx.y].
template <SnapshotQuant kMode, int kVec, typename E>
__global__ void encode_rows(const E* values, std::int64_t n, const float* scales, unsigned char* payload,
                            std::int64_t row_bytes) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const std::int64_t warp = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * blockDim.x / 32;
  SnapshotScale s;
  s.scale = scales[blockIdx.y];
  s.reciprocal = core::quant_reciprocal(s.scale);
  unsigned char* row = payload + blockIdx.y * row_bytes;
  for (std::int64_t piece = warp * 32 * kVec; piece < n; piece += warps * 32 * kVec) {  // warp-uniform
    const std::int64_t c0 = piece + lane * kVec;
    const bool active = c0 < n;
    PackedRow<E, kVec> x = {};
    if (active) cuda::load_packed(values + c0, x);
    cuda::encode_snapshot_piece<kMode, kVec, E>(row, c0, active, x, s);
  }
}

template <SnapshotQuant kMode, typename E>
void launch_encode(const void* values, std::int64_t n, const float* scales, int rows, unsigned char* payload,
                   std::int64_t row_bytes, int vec) {
  const dim3 grid(64, static_cast<unsigned>(rows));
  if (vec == 8) {
    encode_rows<kMode, 8, E><<<grid, 256>>>(static_cast<const E*>(values), n, scales, payload, row_bytes);
  } else {
    encode_rows<kMode, 1, E><<<grid, 256>>>(static_cast<const E*>(values), n, scales, payload, row_bytes);
  }
}

// One warp per row: lane l decodes and restores the pieces at columns 256 s + 8 l, as the
// backward's slot kernel does.
template <bool kVec, typename E>
__global__ void decode_rows(SnapshotRows rows, std::int64_t hd, std::int64_t hd8, float* values, E* restored) {
  const std::int64_t r = blockIdx.x;
  for (std::int64_t c0 = threadIdx.x * kLaneCols; c0 < hd; c0 += 32 * kLaneCols) {
    float x[kLaneCols];
    cuda::load_snapshot_piece<kVec, E>(rows, r, c0, hd, x);
#pragma unroll
    for (int k = 0; k < kLaneCols; ++k) values[r * hd8 + c0 + k] = x[k];
    cuda::restore_snapshot_piece<kVec>(rows, r, c0, hd, x, restored + r * hd8);
  }
}

// One warp per row, as the saving forward takes a written row's scale: the amax of each piece of
// 32 * kVec columns as loaded (snapshot_piece_amax on load_packed's piece, as the gather takes it
// per column tile; stored by lane s % 32) into parts [rows, pieces], then their reduction
// (snapshot_scale_of_parts, as the group writer does it).
template <SnapshotQuant kMode, int kVec, typename E>
__global__ void row_scales(const E* rows, std::int64_t hd, float* parts, float* scales) {
  const int lane = static_cast<int>(threadIdx.x);
  const int pieces = static_cast<int>((hd + 32 * kVec - 1) / (32 * kVec));
  const E* row = rows + blockIdx.x * hd;
  float* row_parts = parts + static_cast<std::int64_t>(blockIdx.x) * pieces;
  for (int s = 0; s < pieces; ++s) {
    const std::int64_t c0 = static_cast<std::int64_t>(s) * 32 * kVec + lane * kVec;
    PackedRow<E, kVec> x = {};
    if (c0 < hd) cuda::load_packed(row + c0, x);
    const float amax = cuda::snapshot_piece_amax(x);
    if (lane == s % 32) row_parts[s] = amax;
  }
  __syncwarp();
  const SnapshotScale s = cuda::snapshot_scale_of_parts<kMode>(row_parts, pieces, lane);
  if (lane == 0) scales[blockIdx.x] = s.scale;
}

__device__ bool same_rounding(std::uint32_t bits, float hardware) {
  const float want = core::round_to_bf16(__uint_as_float(bits));
  if (isnan(want)) return isnan(hardware);
  return __float_as_uint(want) == __float_as_uint(hardware);
}

// Every f32 bit pattern, two at a time (the pair a round_pair_to_bf16 rounds together).
__global__ void bf16_rounding_mismatches(unsigned long long* count) {
  unsigned long long mine = 0;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (1ull << 31);
       i += stride) {
    const auto a = static_cast<std::uint32_t>(2 * i), b = a + 1u;
    float qa, qb;
    cuda::round_pair_to_bf16(__uint_as_float(a), __uint_as_float(b), qa, qb);
    mine += (same_rounding(a, qa) ? 0u : 1u) + (same_rounding(b, qb) ? 0u : 1u);
  }
  if (mine != 0) atomicAdd(count, mine);
}

std::size_t element_bytes(DType bank) { return bank == DType::bf16 ? 2u : 4u; }

}  // namespace

std::vector<std::uint8_t> device_encode(SnapshotQuant mode, DType bank, const void* values, std::int64_t n,
                                        const std::vector<float>& scales, int vec) {
  const auto rows = static_cast<int>(scales.size());
  const auto row_bytes = static_cast<std::int64_t>(core::snapshot_payload_bytes(mode, bank, n));
  const auto payload_bytes = static_cast<std::size_t>(row_bytes) * scales.size();
  Buffer d_values(static_cast<std::size_t>(n) * element_bytes(bank)), d_scales(scales.size() * sizeof(float)),
      d_payload(payload_bytes);
  upload(d_values, values, static_cast<std::size_t>(n) * element_bytes(bank));
  upload(d_scales, scales.data(), scales.size() * sizeof(float));
  cuda_ok(cudaMemset(d_payload.get(), 0xa5, payload_bytes), "cudaMemset");
  const auto* s = static_cast<const float*>(d_scales.get());
  auto* p = static_cast<unsigned char*>(d_payload.get());
  const bool fp8 = mode == SnapshotQuant::fp8;
  if (bank == DType::bf16) {
    if (fp8) launch_encode<SnapshotQuant::fp8, Bf16Bits>(d_values.get(), n, s, rows, p, row_bytes, vec);
    else launch_encode<SnapshotQuant::int4, Bf16Bits>(d_values.get(), n, s, rows, p, row_bytes, vec);
  } else {
    if (fp8) launch_encode<SnapshotQuant::fp8, float>(d_values.get(), n, s, rows, p, row_bytes, vec);
    else launch_encode<SnapshotQuant::int4, float>(d_values.get(), n, s, rows, p, row_bytes, vec);
  }
  finish("encode_rows");
  std::vector<std::uint8_t> payload(payload_bytes);
  download(payload.data(), d_payload, payload_bytes);
  return payload;
}

DecodedRows device_decode(SnapshotQuant mode, DType bank, const std::vector<std::uint8_t>& payload,
                          std::int64_t row_bytes, std::int64_t hd, const std::vector<float>& scales, bool vec) {
  const auto rows = static_cast<unsigned>(scales.size());
  const std::int64_t hd8 = (hd + kLaneCols - 1) / kLaneCols * kLaneCols;
  const auto cells = static_cast<std::size_t>(hd8) * scales.size();
  Buffer d_payload(payload.size()), d_scales(scales.size() * sizeof(float)), d_values(cells * sizeof(float)),
      d_restored(cells * element_bytes(bank));
  upload(d_payload, payload.data(), payload.size());
  upload(d_scales, scales.data(), scales.size() * sizeof(float));
  cuda_ok(cudaMemset(d_values.get(), 0xff, cells * sizeof(float)), "cudaMemset");
  cuda_ok(cudaMemset(d_restored.get(), 0, cells * element_bytes(bank)), "cudaMemset");
  SnapshotRows s;
  s.payload = d_payload.get();
  s.scales = static_cast<float*>(d_scales.get());
  s.mode = mode;
  s.row_bytes = row_bytes;
  auto* values = static_cast<float*>(d_values.get());
  if (bank == DType::bf16) {
    auto* restored = static_cast<Bf16Bits*>(d_restored.get());
    if (vec) decode_rows<true><<<rows, 32>>>(s, hd, hd8, values, restored);
    else decode_rows<false><<<rows, 32>>>(s, hd, hd8, values, restored);
  } else {
    auto* restored = static_cast<float*>(d_restored.get());
    if (vec) decode_rows<true><<<rows, 32>>>(s, hd, hd8, values, restored);
    else decode_rows<false><<<rows, 32>>>(s, hd, hd8, values, restored);
  }
  finish("decode_rows");
  DecodedRows out;
  out.values.resize(cells);
  download(out.values.data(), d_values, cells * sizeof(float));
  out.restored.resize(cells);
  if (bank == DType::bf16) {
    std::vector<std::uint16_t> bits(cells);
    download(bits.data(), d_restored, cells * sizeof(std::uint16_t));
    for (std::size_t i = 0; i < cells; ++i) out.restored[i] = bits[i];
  } else {
    download(out.restored.data(), d_restored, cells * sizeof(std::uint32_t));
  }
  return out;
}

std::vector<float> device_row_scales(SnapshotQuant mode, DType bank, const void* rows, std::int64_t count,
                                     std::int64_t hd, int vec) {
  const std::size_t bytes = static_cast<std::size_t>(count * hd) * element_bytes(bank);
  const std::int64_t pieces = (hd + 32 * vec - 1) / (32 * vec);
  Buffer d_rows(bytes), d_scales(static_cast<std::size_t>(count) * sizeof(float)),
      d_parts(static_cast<std::size_t>(count * pieces) * sizeof(float));
  upload(d_rows, rows, bytes);
  auto* scales = static_cast<float*>(d_scales.get());
  auto* parts = static_cast<float*>(d_parts.get());
  const auto grid = static_cast<unsigned>(count);
  const bool fp8 = mode == SnapshotQuant::fp8;
  const auto* bf16_rows = static_cast<const Bf16Bits*>(d_rows.get());
  const auto* f32_rows = static_cast<const float*>(d_rows.get());
  if (bank == DType::bf16) {
    if (vec == 8) {
      if (fp8) row_scales<SnapshotQuant::fp8, 8><<<grid, 32>>>(bf16_rows, hd, parts, scales);
      else row_scales<SnapshotQuant::int4, 8><<<grid, 32>>>(bf16_rows, hd, parts, scales);
    } else {
      if (fp8) row_scales<SnapshotQuant::fp8, 1><<<grid, 32>>>(bf16_rows, hd, parts, scales);
      else row_scales<SnapshotQuant::int4, 1><<<grid, 32>>>(bf16_rows, hd, parts, scales);
    }
  } else {
    if (vec == 8) {
      if (fp8) row_scales<SnapshotQuant::fp8, 8><<<grid, 32>>>(f32_rows, hd, parts, scales);
      else row_scales<SnapshotQuant::int4, 8><<<grid, 32>>>(f32_rows, hd, parts, scales);
    } else {
      if (fp8) row_scales<SnapshotQuant::fp8, 1><<<grid, 32>>>(f32_rows, hd, parts, scales);
      else row_scales<SnapshotQuant::int4, 1><<<grid, 32>>>(f32_rows, hd, parts, scales);
    }
  }
  finish("row_scales");
  std::vector<float> out(static_cast<std::size_t>(count));
  download(out.data(), d_scales, out.size() * sizeof(float));
  return out;
}

std::uint64_t device_bf16_rounding_mismatches() {
  Buffer d_count(sizeof(unsigned long long));
  cuda_ok(cudaMemset(d_count.get(), 0, sizeof(unsigned long long)), "cudaMemset");
  bf16_rounding_mismatches<<<1024, 256>>>(static_cast<unsigned long long*>(d_count.get()));
  finish("bf16_rounding_mismatches");
  unsigned long long count = 0;
  download(&count, d_count, sizeof count);
  return count;
}

}  // namespace sdm::testing
