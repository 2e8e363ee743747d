// chunk_products.hpp - the test knob of the chunk products (chunk_products.cuh: the forward's dual
// product, forward/dual.cu, and the backward's solve_side, backward/tokens.cu), which changes no bit.
//
// Chunks of 64 < C <= 128 take the medium kernels (dual_product_medium, solve_side_medium: every
// 64 x 64 block a CTA needs is staged by cp.async, with the token rows' loads, before its first
// barrier) where their shared memory fits the device, else the blockwise kernels that C > 128 takes
// (dual_product, solve_side: one block at a time between barriers). Both compute every output as
// the same fmaf chain, so they give the same bits; set_blockwise_chunk_products(true) makes those
// chunks take the blockwise kernels, so that tests can compare the two. Process-wide, read at each
// launch.
#pragma once

namespace sdm::cuda {

bool blockwise_chunk_products();
void set_blockwise_chunk_products(bool on);

}  // namespace sdm::cuda
