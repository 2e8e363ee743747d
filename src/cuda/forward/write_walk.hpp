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

// automatic: the walk where it runs (write_walk_runs) and pays (write_walk_pays), else the
// per-position writer; walk: the walk wherever it runs; per_position: never the walk.
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

// Batches of 32 write positions a warp of the walk's grid takes, on average, at this shape on a
// device of `multiprocessors` SMs: a share's C*W / shares positions over the CTA's 8 (C <= 64) or 16
// warps (write_walk.cu sizes the shares: about two CTAs an SM, at least one batch a warp).
double write_walk_batches_per_warp(std::int64_t hd, std::int64_t C, std::int64_t W, std::int64_t P,
                                   int multiprocessors);

// Whether the automatic choice takes the walk where it runs: at least kWalkMinBatches batches a
// warp on the current device. A CTA stages its step's columns of the chunk's C delta rows (C KiB)
// before its warps walk; at one batch a warp that cost and the CTA's start are spread over 32
// positions a warp, at several over as many batches (a hypothesis; the profile has to confirm it).
// The rule rests on two measured configs and must be re-checked (H100, 132 SMs, training step,
// C 64, bf16 bank, product-key and heavy-reuse slots): big (hd 2048, P 2, W 64: 1.0 batch a warp,
// 256 CTAs a step over its two step streams) took 4-6.7 % longer with the walk, flagship (hd 1024,
// P 8, W 128: 3.6 batches a warp, 288 CTAs) 0.9-5.5 % less. The CTA count (about two an SM in both)
// does not tell them apart; the step's write positions per SM (62 vs 496) do as well as the
// batches. Any threshold between 1 and 3.6 fits the data: readme, C 128, other P / hd / W and
// other devices are still to measure.
constexpr double kWalkMinBatches = 2.0;
bool write_walk_pays(const Geometry& geo);

// The writer this step takes: write_walk_runs, and forced to the walk or (automatic) it pays.
bool use_write_walk(const Geometry& geo, const StepBuffers& sb);

// Launches of the walk in this process (tests check that a case ran it).
std::int64_t write_walk_launches();

void launch_write_walk(const Geometry& geo, const Phase1Buffers& p1, const StepBuffers& sb, std::int64_t ti,
                       cudaStream_t stream);

}  // namespace sdm::cuda
