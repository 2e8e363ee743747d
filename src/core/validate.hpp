// validate.hpp - the one validation module of the op (docs/spec.md §7, §8, §11).
//
// Every entry point calls these before any work. Shape / dtype / device / limit errors throw
// sdm::TypeError (dtypes) or sdm::ValueError (everything else); the message names the
// argument, what was expected and what was given. Index checks (validate=True) name the
// tensor, stream, token and lane of the first violation in (stream, token, lane) order.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "sdm/ops.hpp"
#include "sdm/plan.hpp"

namespace sdm::core {

// Which bank dtypes an entry point accepts: the engines take bf16 / f32; the float64
// reference also takes f64 (an exact oracle for finite differences and golden vectors).
enum class BankDTypes { engine, reference };

// The limits (sdm/options.hpp), by their core names.
using sdm::kMaxBankRows;
using sdm::kMaxChunk;
using sdm::kMaxElements;
using sdm::kMaxWidth;

// The validated geometry of one chunked call (public: it is part of the plan).
using WriteReadShape = sdm::WriteReadShape;

// The dtype of a bank gradient (and of the backward's bank-gradient rows between chunks): bf16
// for a bf16 bank unless grad_bank_fp32, else f32 (docs/spec.md §4).
constexpr DType bank_grad_dtype(DType bank, bool grad_bank_fp32) {
  return bank == DType::bf16 && !grad_bank_fp32 ? DType::bf16 : DType::f32;
}

// The validated geometry of one decode step.
struct DecodeShape {
  std::int64_t streams = 0, W = 0, R = 0, G = 1, hd = 0, S = 0;
  DType bank = DType::f32;
};

// Checks every argument of the chunked op except index values; `readings` [P, T, hd]
// (dtype: the bank's for the engines, any float dtype for the reference) is skipped when
// absent (TensorRef{}). Float inputs: f32 / bf16 / f16 (and f64 for the reference); the
// returned C is options.chunk_size clamped to T.
WriteReadShape validate_write_read(const WriteReadArgs& args, const TensorRef& readings,
                                   const WriteReadOptions& options, BankDTypes banks);

// Index preconditions of docs/spec.md §8 on host-visible indices: each k_idx / q_idx of stream p in
// [p*sps, (p+1)*sps), the W write slots of a token distinct (duplicate read slots are
// allowed). Throws sdm::ValueError for the first violation in (stream, token, lane) order,
// k_idx before q_idx within a token, e.g.
// "k_idx[stream 1, token 4, lane 2] = 37 is outside stream 1's rows [16, 32)".
void check_write_read_indices(const WriteReadArgs& args, const WriteReadShape& shape);
// The same check for stream p alone (check_write_read_indices runs p = 0 .. P - 1 in order
// and so reports the error of the lowest stream; a caller splitting streams over threads
// reports the lowest stream's error to give the same message).
void check_write_read_indices_of_stream(const WriteReadArgs& args, const WriteReadShape& shape, std::int64_t p);

// Extra checks of the backward (after validate_write_read): grad_readings [P, T, hd] float;
// grad_final_bank absent or [S, hd] float; each defined gradient of `grads` shaped like its
// input, float dtype, contiguous, on the bank's device (arguments named "grad_<input>").
// The engine's `saved` buffer is checked by the dispatcher, which knows its size. The working
// bank (args.memory, restored in place) and every gradient output must not share memory with
// any other argument.
void validate_write_read_backward(const WriteReadArgs& args, const WriteReadShape& shape,
                                  const TensorRef& grad_readings, const TensorRef& grad_final_bank,
                                  const WriteReadGrads& grads);

// Checks every argument of the decode step except index values (docs/spec.md §8, §9): the
// leading dims of k_idx are the streams (their product), shared by every tensor; beta
// [..., 1]; g [..., 1] or [..., W]; readings (skipped when absent) shaped like v. With
// options.slots_per_stream >= 1 the bank must hold streams * slots_per_stream rows. The bank
// and `readings` must not share memory with any other argument.
DecodeShape validate_decode(const WriteReadArgs& args, const TensorRef& readings,
                            const DecodeOptions& options, BankDTypes banks);

// Decode index preconditions: indices in [0, S) (in stream p's rows when
// options.slots_per_stream >= 1), write slots of a stream distinct; duplicate reads allowed.
// The first violation in (stream, lane) order is reported, k_idx before q_idx per stream.
void check_decode_indices(const WriteReadArgs& args, const DecodeShape& shape,
                          const DecodeOptions& options);

// A tensor argument and its name, for the overlap checks.
struct NamedTensor {
  const TensorRef& tensor;
  const char* name;
};
using NamedTensors = std::vector<NamedTensor>;

// The op's tensors by name (references into `args` / `grads`): the seven inputs and the bank;
// the six gradient outputs.
NamedTensors named_args(const WriteReadArgs& args);
NamedTensors named_grads(const WriteReadGrads& grads);

// A TensorRef is well formed before anything else reads it: ndim in 0..TensorRef::kMaxDims (a larger
// one would read past sizes[] and strides[]), no negative size, no negative stride. Throws
// sdm::ValueError naming `name`, e.g. "k_idx has ndim = 5; a TensorRef holds 0 to 4 dimensions".
void check_tensor_ref(const TensorRef& t, const char* name);

// What the engines need beyond the shape-only checks (which accept data-less views, e.g. the
// PyTorch binding's fake kernels): every tensor of `required` present, and every tensor of
// `required` and every defined one of `optional` well formed (check_tensor_ref) with data: a
// TensorRef with elements and data == nullptr is refused by name ("k_idx has no data (data ==
// nullptr) but its shape [2, 5, 3] has elements; ...").
void check_engine_data(const NamedTensors& required, const NamedTensors& optional);

// Throws sdm::ValueError when a tensor the call writes (`written`) shares bytes with any other
// argument (`others`, which may include `written`'s own entries: a tensor is never compared with
// itself). Tensors are compared by the byte ranges they span; absent and empty ones never
// overlap. The message names the other tensor and the written one.
void check_disjoint(const NamedTensors& written, const NamedTensors& others);

}  // namespace sdm::core
