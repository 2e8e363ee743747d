// parse_list.hpp - the GPU benchmarks' comma-separated command-line lists (bench_cuda.cu,
// walk_floor.cu, gather_floor.cu): "a,b,c" -> parse(a), parse(b), parse(c) in that order.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

namespace sdm::bench {

template <typename Parse>
auto parse_list(const std::string& list, Parse&& parse) {
  std::vector<decltype(parse(std::string{}))> items;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t comma = std::min(list.find(',', start), list.size());
    items.push_back(parse(list.substr(start, comma - start)));
    start = comma + 1;
  }
  return items;
}

}  // namespace sdm::bench
