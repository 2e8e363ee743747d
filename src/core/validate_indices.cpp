// validate_indices.cpp - the index checks of validate=True on host-visible indices (docs/spec.md
// §8; validate.hpp): each k_idx / q_idx in its stream's rows (or the bank's for a decode step
// without slots_per_stream), the write slots of a token distinct; the first violation in (stream,
// token, lane) order, k_idx before q_idx within a token.
#include <algorithm>
#include <array>
#include <optional>
#include <string>

#include "core/validate.hpp"
#include "sdm/error.hpp"

namespace sdm::core {
namespace {

// The rows a stream's indices may address: [lo, hi).
struct RowRange {
  std::int64_t lo, hi;
  std::string owner;  // "stream 3's" or "the bank's"
};

RowRange stream_rows(std::int64_t stream, std::int64_t slots_per_stream) {
  return {stream * slots_per_stream, (stream + 1) * slots_per_stream,
          "stream " + std::to_string(stream) + "'s"};
}

// Where an index lives: "k_idx[stream 1, token 4, lane 2]" (no token for the decode step).
struct IndexPlace {
  const char* tensor;
  std::int64_t stream;
  std::optional<std::int64_t> token;
  std::string name(std::int64_t lane) const {
    std::string out = std::string(tensor) + "[stream " + std::to_string(stream);
    if (token) out += ", token " + std::to_string(*token);
    return out + ", lane " + std::to_string(lane) + "]";
  }
};

// Whether two of the `width` (<= kMaxWidth) indices are equal; `empty` is a value none of
// them has. An open-addressing set (linear probing) of at least 2 * width slots: one pass
// instead of a sort per token (the whole index check is serial and ran at ~15 % of a small
// no-grad forward with the sort). Only speeds the answer up: yes or no, as before.
template <typename Index>
bool has_repeat(const Index* idx, std::int64_t width, std::int64_t empty) {
  std::array<std::int64_t, 2 * kMaxWidth> table;
  std::size_t size = 8;
  while (size < 2 * static_cast<std::size_t>(width)) size *= 2;
  const std::size_t mask = size - 1;
  std::fill(table.begin(), table.begin() + static_cast<std::ptrdiff_t>(size), empty);
  for (std::int64_t lane = 0; lane < width; ++lane) {
    const std::int64_t value = idx[lane];
    std::size_t slot = static_cast<std::size_t>((static_cast<std::uint64_t>(value) * 0x9e3779b97f4a7c15ull) >> 40) & mask;
    while (table[slot] != empty) {
      if (table[slot] == value) return true;
      slot = (slot + 1) & mask;
    }
    table[slot] = value;
  }
  return false;
}

// Checks the `width` indices of one token: each in `rows`, and (for write slots) distinct.
template <typename Index>
void check_token_indices(const Index* idx, std::int64_t width, const RowRange& rows, bool distinct,
                         const IndexPlace& place) {
  for (std::int64_t lane = 0; lane < width; ++lane) {
    const std::int64_t value = idx[lane];
    if (value < rows.lo || value >= rows.hi) {
      throw ValueError(place.tensor, place.name(lane) + " = " + std::to_string(value) + " is outside " +
                                         rows.owner + " rows [" + std::to_string(rows.lo) + ", " +
                                         std::to_string(rows.hi) + ")");
    }
  }
  if (!distinct || width < 2 || !has_repeat(idx, width, rows.lo - 1)) return;
  // A repeat exists: report the first lane that repeats an earlier lane.
  for (std::int64_t lane = 1; lane < width; ++lane) {
    for (std::int64_t earlier = 0; earlier < lane; ++earlier) {
      if (idx[earlier] != idx[lane]) continue;
      throw ValueError(place.tensor, place.name(lane) + " = " + std::to_string(idx[lane]) +
                                         " repeats lane " + std::to_string(earlier) +
                                         "; the write slots of a token must be distinct");
    }
  }
}

// Checks the `width` indices of `t` (int32 or int64) that start at element `offset`.
void check_token(const TensorRef& t, std::int64_t offset, std::int64_t width, const RowRange& rows,
                 bool distinct, const IndexPlace& place) {
  if (t.dtype == DType::i32) {
    check_token_indices(t.data_as<const std::int32_t>() + offset, width, rows, distinct, place);
  } else {
    check_token_indices(t.data_as<const std::int64_t>() + offset, width, rows, distinct, place);
  }
}

}  // namespace

void check_write_read_indices_of_stream(const WriteReadArgs& args, const WriteReadShape& shape, std::int64_t p) {
  const RowRange rows = stream_rows(p, shape.slots_per_stream);
  for (std::int64_t t = 0; t < shape.T; ++t) {
    const std::int64_t token = p * shape.T + t;
    check_token(args.k_idx, token * shape.W, shape.W, rows, true, {"k_idx", p, t});
    check_token(args.q_idx, token * shape.R, shape.R, rows, false, {"q_idx", p, t});
  }
}

void check_write_read_indices(const WriteReadArgs& args, const WriteReadShape& shape) {
  for (std::int64_t p = 0; p < shape.P; ++p) check_write_read_indices_of_stream(args, shape, p);
}

void check_decode_indices(const WriteReadArgs& args, const DecodeShape& shape, const DecodeOptions& options) {
  for (std::int64_t p = 0; p < shape.streams; ++p) {
    const RowRange rows = options.slots_per_stream >= 1 ? stream_rows(p, options.slots_per_stream)
                                                        : RowRange{0, shape.S, "the bank's"};
    check_token(args.k_idx, p * shape.W, shape.W, rows, true, {"k_idx", p, std::nullopt});
    check_token(args.q_idx, p * shape.R, shape.R, rows, false, {"q_idx", p, std::nullopt});
  }
}

}  // namespace sdm::core
