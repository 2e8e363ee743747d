// bench_passes.hpp - the timed passes of the benchmark and the bytes each must move.
//
//   fwd       no-grad forward (sdm::write_read_forward)
//   fwd_save  saving forward (sdm::write_read_forward_saving)
//   fwd_bwd   saving forward + backward (sdm::write_read_backward)
//   decode    T decode steps of P streams (sdm::decode_step), one token per step
// Each repeat starts from the same initial bank (restored outside the timed region).
#pragma once

#include <string>
#include <vector>

#include "bench_inputs.hpp"
#include "sdm/options.hpp"

namespace sdm::bench {

enum class Pass { fwd, fwd_save, fwd_bwd, decode };

const std::vector<Pass>& all_passes();
const char* pass_name(Pass pass);
Pass parse_pass(const std::string& name);  // throws std::invalid_argument

struct PassSettings {
  int threads = 1;
  SnapshotQuant snapshot = SnapshotQuant::none;
  bool validate = true;  // the index checks of docs/spec.md §8 (part of the timed call)
  int warmup = 1;  // untimed runs before the repeats
  int repeat = 5;
  bool digest = false;  // print a hash of the last run's outputs (bitwise A/B of engines)
};

struct PassResult {
  std::vector<double> ms;  // one per repeat
  double median_ms = 0.0;
  // Process CPU time (all threads) over wall time, summed over the repeats: close to the
  // thread count when the threads ran undisturbed, lower when the machine was busy.
  double cpu_per_wall = 0.0;
};

// Bytes the pass must move through memory at least (see the formula in bench_passes.cpp).
double pass_bytes(const BenchConfig& config, DType bank, Pass pass, SnapshotQuant snapshot);

PassResult run_pass(const BenchInputs& inputs, Pass pass, const PassSettings& settings);

}  // namespace sdm::bench
