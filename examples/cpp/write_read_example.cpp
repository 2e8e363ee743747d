// write_read_example.cpp - sdm from plain C++: one chunked forward with its backward, one
// decode step, and an error. Build: part of the CMake project (target sdm_write_read_example).
//
//   bank [P * slots, hd] f32; P = 2 streams of T = 10 tokens; each token writes W = 3 rows
//   and reads R = 2 rows of its own stream (absolute row = p * slots + slot).
#include <cstdint>
#include <cstdio>
#include <type_traits>
#include <vector>

#include "sdm/sdm.hpp"

int main() {
  constexpr std::int64_t P = 2, T = 10, W = 3, R = 2, hd = 8, slots = 64;
  using sdm::DType;
  using sdm::TensorRef;

  std::vector<float> bank(P * slots * hd), k_val(P * T * W), v(P * T * hd), beta(P * T), g(P * T);
  std::vector<float> q_val(P * T * R), readings(P * T * hd);
  std::vector<std::int32_t> k_idx(P * T * W), q_idx(P * T * R);
  for (std::size_t i = 0; i < bank.size(); ++i) bank[i] = 0.01f * static_cast<float>(i % 17);
  for (std::int64_t p = 0; p < P; ++p) {
    for (std::int64_t t = 0; t < T; ++t) {
      const std::int64_t token = p * T + t;
      for (std::int64_t w = 0; w < W; ++w) {
        k_idx[token * W + w] = static_cast<std::int32_t>(p * slots + (7 * t + 5 * w) % slots);  // distinct
        k_val[token * W + w] = 1.0f / W;
      }
      for (std::int64_t r = 0; r < R; ++r) {
        q_idx[token * R + r] = static_cast<std::int32_t>(p * slots + (7 * t + 5 * r) % slots);
        q_val[token * R + r] = 0.5f;
      }
      for (std::int64_t d = 0; d < hd; ++d) v[token * hd + d] = 0.1f * static_cast<float>(d - t);
      beta[token] = 0.5f;
      g[token] = -0.1f;  // log-decay of the rows a token writes
    }
  }

  sdm::WriteReadArgs args;
  args.memory = TensorRef::contiguous(bank.data(), DType::f32, {P * slots, hd});
  args.k_idx = TensorRef::contiguous(k_idx.data(), DType::i32, {P, T, W});
  args.k_val = TensorRef::contiguous(k_val.data(), DType::f32, {P, T, W});
  args.v = TensorRef::contiguous(v.data(), DType::f32, {P, T, hd});
  args.beta = TensorRef::contiguous(beta.data(), DType::f32, {P, T});
  args.g = TensorRef::contiguous(g.data(), DType::f32, {P, T, 1});
  args.q_idx = TensorRef::contiguous(q_idx.data(), DType::i32, {P, T, R});
  args.q_val = TensorRef::contiguous(q_val.data(), DType::f32, {P, T, R});
  const TensorRef out = TensorRef::contiguous(readings.data(), DType::f32, {P, T, hd});

  const std::vector<float> initial_bank = bank;
  sdm::WriteReadOptions options;
  options.slots_per_stream = slots;
  options.chunk_size = 4;

  // Training: the saving forward (bank -> final state), then the backward of
  // loss = sum(readings), which restores the bank to its initial state in place.
  std::vector<unsigned char> saved(sdm::write_read_saved_bytes(args, options));
  sdm::write_read_forward_saving(args, out, TensorRef::contiguous(saved.data(), DType::u8,
                                                                  {static_cast<std::int64_t>(saved.size())}),
                                 options);
  double sum = 0;
  for (float y : readings) sum += y;
  std::printf("forward: sum(readings) = %.6f, saved %zu bytes\n", sum, saved.size());

  std::vector<float> grad_readings(readings.size(), 1.0f), grad_bank(bank.size()), grad_v(v.size());
  sdm::WriteReadGrads grads;
  grads.memory = TensorRef::contiguous(grad_bank.data(), DType::f32, {P * slots, hd});
  grads.v = TensorRef::contiguous(grad_v.data(), DType::f32, {P, T, hd});
  sdm::write_read_backward(args, TensorRef::contiguous(saved.data(), DType::u8, {static_cast<std::int64_t>(saved.size())}),
                           TensorRef::contiguous(grad_readings.data(), DType::f32, {P, T, hd}), TensorRef{},
                           grads, options);
  std::printf("backward: d loss / d v[0, 0, 0] = %.6f, bank restored: %s\n", grad_v[0],
              bank == initial_bank ? "yes" : "no");

  // Inference: one more token per stream, in place; the inputs are [P, ...] (one token each),
  // here token 0 of each stream again.
  auto token0 = [&](const auto& per_token, std::int64_t width) {
    std::vector<typename std::decay_t<decltype(per_token)>::value_type> first;
    for (std::int64_t p = 0; p < P; ++p) {
      first.insert(first.end(), per_token.begin() + p * T * width, per_token.begin() + (p * T + 1) * width);
    }
    return first;
  };
  auto step_k_idx = token0(k_idx, W), step_q_idx = token0(q_idx, R);
  auto step_k_val = token0(k_val, W), step_v = token0(v, hd), step_beta = token0(beta, 1);
  auto step_g = token0(g, 1), step_q_val = token0(q_val, R);
  sdm::WriteReadArgs step;
  step.memory = args.memory;
  step.k_idx = TensorRef::contiguous(step_k_idx.data(), DType::i32, {P, W});
  step.k_val = TensorRef::contiguous(step_k_val.data(), DType::f32, {P, W});
  step.v = TensorRef::contiguous(step_v.data(), DType::f32, {P, hd});
  step.beta = TensorRef::contiguous(step_beta.data(), DType::f32, {P, 1});
  step.g = TensorRef::contiguous(step_g.data(), DType::f32, {P, 1});
  step.q_idx = TensorRef::contiguous(step_q_idx.data(), DType::i32, {P, R});
  step.q_val = TensorRef::contiguous(step_q_val.data(), DType::f32, {P, R});
  sdm::DecodeOptions decode;
  decode.slots_per_stream = slots;
  sdm::decode_step(step, TensorRef::contiguous(readings.data(), DType::f32, {P, hd}), decode);
  std::printf("decode: readings of stream 0 start %.6f\n", readings[0]);

  // Bad input: an index outside its stream's rows is refused before any work.
  k_idx[W] = static_cast<std::int32_t>(slots);  // stream 0, token 1, lane 0 -> a row of stream 1
  try {
    sdm::write_read_forward(args, out, options);
    std::printf("error: the bad index was accepted\n");
    return 1;
  } catch (const sdm::ValueError& e) {
    std::printf("refused: %s\n", e.what());
  }
  return 0;
}
