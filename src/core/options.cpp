// options.cpp - names of the snapshot modes.
#include <string>

#include "sdm/error.hpp"
#include "sdm/options.hpp"

namespace sdm {

const char* snapshot_quant_name(SnapshotQuant mode) {
  switch (mode) {
    case SnapshotQuant::none: return "none";
    case SnapshotQuant::bf16: return "bf16";
    case SnapshotQuant::fp8: return "fp8";
    case SnapshotQuant::int4: return "int4";
  }
  return "unknown";
}

SnapshotQuant parse_snapshot_quant(std::string_view name) {
  for (SnapshotQuant mode : {SnapshotQuant::none, SnapshotQuant::bf16, SnapshotQuant::fp8,
                             SnapshotQuant::int4}) {
    if (name == snapshot_quant_name(mode)) return mode;
  }
  throw ValueError("snapshot_quant", "snapshot_quant must be one of \"none\", \"bf16\", \"fp8\", "
                                     "\"int4\"; got \"" + std::string(name) + "\"");
}

}  // namespace sdm
