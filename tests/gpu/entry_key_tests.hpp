// entry_key_tests.hpp - the entry-key tests (test_entry_keys.cu), run by sdm_gpu_sort_tests'
// main (test_chunk_sort.cu).
#pragma once

namespace sdm::testing {

void test_entry_key_shapes();          // lanes 1..256, every chunk size class, repeats, both index dtypes
void test_entry_key_engine_configs();  // readme, flagship at C 64 and 128

}  // namespace sdm::testing
