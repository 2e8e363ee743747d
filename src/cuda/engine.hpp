// engine.hpp - the CUDA engine (built with SDM_ENABLE_CUDA): cuda::engine, the table of
// core/engine.hpp that src/ops/dispatch.cpp runs CUDA banks through (the only file src/ops
// includes from here), and the passes engine.cu builds it from. Each pass runs on
// options.cuda_stream (nullptr: the legacy default stream) on the bank's device with no host sync
// except, with options.validate, the index check (common/call.hpp) and the backward's stamp check
// (saved/stamp.cu); both are skipped while the stream is being captured into a CUDA graph
// (out-of-range entries and repeated write lanes are then masked, docs/spec.md §8). The passes'
// `saved` is the buffer's body after the stamp (core::saved_body); engine.cu stamps it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/engine.hpp"
#include "core/saved_header.hpp"

namespace sdm::cuda {

extern const core::Engine engine;

core::engine_fn::SavedBodyBytes write_read_saved_bytes;    // saved/layout.cu
core::engine_fn::Forward write_read_forward;                // forward/write_read.cu
core::engine_fn::ForwardSaving write_read_forward_saving;    // forward/write_read.cu
core::engine_fn::Backward write_read_backward;              // backward/backward.cu
core::engine_fn::DecodeStep decode_step;                    // decode/decode_step.cu
core::engine_fn::CountWriteGroups write_groups_count;       // forward/write_groups_count.cu

// The stamp (saved/stamp.cu): written by stamp_saved without a sync; checked by check_saved_stamp
// with one host sync (none, and no check, while the stream is being captured). In the same sync
// check_saved_stamp reads the call's write groups (the i64 at byte `write_groups_at` of `saved`: the
// Phase 1 region's group_first[N]) and, after the header, refuses more groups than `snapshot_rows`
// (core::check_write_groups_fit, as the CPU backward): a forward that ran unvalidated or under capture
// into a too-small `saved` is not differentiated.
void stamp_saved(const core::SavedHeader& header, const WriteReadArgs& args, const TensorRef& saved,
                 const WriteReadOptions& options);
void check_saved_stamp(const core::SavedHeader& expected, const WriteReadArgs& args, const TensorRef& saved,
                       std::size_t write_groups_at, std::int64_t snapshot_rows, const WriteReadOptions& options);

}  // namespace sdm::cuda
