// saved_header.cpp - the saved buffer's stamp (see saved_header.hpp).
#include "core/saved_header.hpp"

#include <cstring>
#include <string>

#include "sdm/error.hpp"

namespace sdm::core {
namespace {

// The recorded fields: their slots in SavedHeader::fields, and how a message names them (same order).
enum Field : int { kP, kT, kW, kR, kG, kHd, kS, kSlotsPerStream, kC, kBankField, kSnapshotField, kSnapshotRows,
             kUsedFields };
constexpr const char* kFieldNames[] = {
    "streams P",         "tokens T",  "writes per token W", "reads per token R",          "g's last dim G",
    "hd (bank columns)", "bank rows S", "slots_per_stream", "chunk_size (clamped to T)", "bank dtype",
    "snapshot_quant (effective)", "snapshot_rows (effective)",
};
static_assert(sizeof(kFieldNames) / sizeof(kFieldNames[0]) == kUsedFields, "a name per field");
static_assert(kUsedFields <= kSavedFields);

const char* engine_name(std::uint64_t engine) {
  if (engine == static_cast<std::uint64_t>(SavedEngine::cpu)) return "the cpu engine";
  if (engine == static_cast<std::uint64_t>(SavedEngine::cuda)) return "the cuda engine";
  return "an unknown engine";
}

std::string field_value(int field, std::int64_t value) {
  if (field == kBankField) return dtype_name(static_cast<DType>(value));
  if (field == kSnapshotField) return snapshot_quant_name(static_cast<SnapshotQuant>(value));
  return std::to_string(value);
}

template <typename Index>
std::uint64_t hash_of(const TensorRef& t, std::uint64_t tensor) {
  const Index* idx = t.data_as<const Index>();
  std::uint64_t sum = 0;
  const std::int64_t n = t.numel();
  for (std::int64_t i = 0; i < n; ++i) sum += index_hash_term(tensor, static_cast<std::uint64_t>(i), idx[i]);
  return sum;
}

std::uint64_t hash_of(const TensorRef& t, std::uint64_t tensor) {
  return t.dtype == DType::i32 ? hash_of<std::int32_t>(t, tensor) : hash_of<std::int64_t>(t, tensor);
}

[[noreturn]] void refuse(const std::string& why) {
  throw ValueError("saved", "saved " + why + "; pass the saved buffer of the saving forward (sdm.write_read) of "
                            "the same arguments and options");
}

}  // namespace

SavedHeader make_saved_header(const WriteReadPlan& plan, SavedEngine engine) {
  const WriteReadShape& s = plan.shape;
  SavedHeader h;
  h.magic = kSavedMagic;
  h.version = kSavedVersion;
  h.engine = static_cast<std::uint64_t>(engine);
  h.fields[kP] = s.P;
  h.fields[kT] = s.T;
  h.fields[kW] = s.W;
  h.fields[kR] = s.R;
  h.fields[kG] = s.G;
  h.fields[kHd] = s.hd;
  h.fields[kS] = s.S;
  h.fields[kSlotsPerStream] = s.slots_per_stream;
  h.fields[kC] = s.C;
  h.fields[kBankField] = static_cast<std::int64_t>(s.bank);
  h.fields[kSnapshotField] = static_cast<std::int64_t>(plan.snapshot);
  h.fields[kSnapshotRows] = plan.snapshot_rows;
  return h;
}

std::uint64_t index_hash_on_host(const WriteReadArgs& args) {
  return hash_of(args.k_idx, 0) + hash_of(args.q_idx, 1);
}

void check_saved_header(const SavedHeader& expected, const SavedHeader& found, std::uint64_t index_hash) {
  if (found.magic != kSavedMagic) {
    refuse("does not start with the stamp of sdm's saving forward (it is not such a buffer, or it was overwritten)");
  }
  if (found.version != expected.version) {
    refuse("has format version " + std::to_string(found.version) + ", this build reads version " +
           std::to_string(expected.version));
  }
  if (found.engine != expected.engine) {
    refuse(std::string("was made by ") + engine_name(found.engine) + ", this call runs " +
           engine_name(expected.engine));
  }
  for (int f = 0; f < kSavedFields; ++f) {
    if (found.fields[f] == expected.fields[f]) continue;
    const std::string name = f < kUsedFields ? kFieldNames[f] : "reserved field " + std::to_string(f);
    refuse("was made for a call with " + name + " = " + field_value(f, found.fields[f]) + ", this call has " +
           field_value(f, expected.fields[f]));
  }
  if (found.index_hash != index_hash) {
    refuse("was made for other index values (the hash of k_idx and q_idx differs)");
  }
}

void stamp_saved_on_host(SavedHeader header, const WriteReadArgs& args, const TensorRef& saved) {
  header.index_hash = index_hash_on_host(args);
  std::memcpy(saved.data, &header, sizeof header);
}

void check_saved_on_host(const SavedHeader& expected, const WriteReadArgs& args, const TensorRef& saved) {
  SavedHeader found;
  std::memcpy(&found, saved.data, sizeof found);
  check_saved_header(expected, found, index_hash_on_host(args));
}

TensorRef saved_body(const TensorRef& saved) {
  TensorRef body = saved;
  body.data = static_cast<unsigned char*>(saved.data) + kSavedHeaderBytes;
  body.sizes[0] = saved.sizes[0] - static_cast<std::int64_t>(kSavedHeaderBytes);
  return body;
}

}  // namespace sdm::core
