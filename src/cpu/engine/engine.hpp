// engine.hpp - the CPU engine: cpu::engine, the table of core/engine.hpp that src/ops/dispatch.cpp
// runs CPU (and meta, for planning) banks through, and the passes engine.cpp builds it from.
// engine.cpp adds, with options.validate, the host index check (streams split over the threads)
// before any write and the stamp of `saved` (core/saved_header.hpp); the passes below run on
// checked arguments, their `saved` the buffer's body after the stamp (core::saved_body).
#pragma once

#include "core/engine.hpp"

namespace sdm::cpu {

extern const core::Engine engine;

core::engine_fn::SavedBodyBytes write_read_saved_bytes;  // saved_layout.cpp
core::engine_fn::Forward write_read_forward;              // forward.cpp
core::engine_fn::ForwardSaving write_read_forward_saving;  // forward.cpp
core::engine_fn::Backward write_read_backward;            // backward.cpp
core::engine_fn::DecodeStep decode_step;                  // decode.cpp

}  // namespace sdm::cpu
