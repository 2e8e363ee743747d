// write_walk.hpp - the group writer as a walk over staged delta rows (write_walk.cu), and the
// choice between it and the warp-per-position writer (group_writer.cu). Both compute the same
// rows, snapshot bytes and scales bit for bit; the choice decides only the speed.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "cuda/common/geometry.hpp"
#include "cuda/common/step_kernels.hpp"
#include "cuda/forward/phase1.hpp"

namespace sdm::cuda {

// automatic: the walk wherever it runs (write_walk_runs), else the per-position writer.
enum class GroupWriter { automatic, per_position, walk };

// SDM_CUDA_WRITER=positions or walk (read once; automatic without it), unless set_group_writer
// overrode it. Tests and benchmarks set it; no value depends on it.
GroupWriter group_writer_choice();
void set_group_writer(GroupWriter writer);

// Whether the walk can take this step's writes: the vector path (16-byte rows), hd a multiple of
// 256 (every lane owns 8 columns of every column step) and a CTA's staged delta rows (C x 256
// f32) within the device's shared memory.
bool write_walk_fits(std::int64_t hd, std::int64_t C, bool vec8);
bool write_walk_runs(const Geometry& geo, const StepBuffers& sb);

// The writer this step takes: write_walk_runs and not forced to the per-position writer.
bool use_write_walk(const Geometry& geo, const StepBuffers& sb);

// Launches of the walk in this process (tests check that a case ran it).
std::int64_t write_walk_launches();

void launch_write_walk(const Geometry& geo, const Phase1Buffers& p1, const StepBuffers& sb, std::int64_t ti,
                       cudaStream_t stream);

}  // namespace sdm::cuda
