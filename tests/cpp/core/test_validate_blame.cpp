// Which tensor a shape disagreement is blamed on (issue 22 item 8). k_idx fixes the leading dims
// ([P, T] of the chunked op, the stream dims of the decode step) every other tensor is checked
// against; when k_idx itself is the odd one out (more of the tensors sharing those dims agree on
// other values than on k_idx's), the error names k_idx, not the first tensor compared with it.
// Otherwise (one other tensor wrong, or a tie) the disagreeing tensor is named, as before.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "core/validate.hpp"
#include "sdm/error.hpp"
#include "support/expect_rejects.hpp"
#include "support/host_tensor.hpp"
#include "support/problem.hpp"

namespace sdm::testing {
namespace {

using core::BankDTypes;

// "[a, b]" (appended piecewise: GCC 12 warns falsely on a chain of + here).
std::string pair_string(std::int64_t a, std::int64_t b) {
  std::string out = "[";
  out += std::to_string(a);
  out += ", ";
  out += std::to_string(b);
  out += "]";
  return out;
}

struct Chunked {
  Problem pb = make_problem(spec_of(2, 5, 3, 2, 4, 16, 1, DType::f32, 41));
  HostTensor readings = pb.make_readings(DType::f32);
  WriteReadArgs args = pb.args();
  WriteReadOptions options;
  Chunked() { options.slots_per_stream = 16; }
  std::function<void()> validating(const TensorRef& out) {
    return [this, out] { core::validate_write_read(args, out, options, BankDTypes::engine); };
  }
};

TEST(ShapeBlame, AWrongKIdxIsBlamedOnKIdxNotOnTheTensorsThatAgree) {
  for (const auto& dims : {std::vector<std::int64_t>{2, 6, 3}, std::vector<std::int64_t>{3, 5, 3},
                           std::vector<std::int64_t>{1, 5, 3}, std::vector<std::int64_t>{2, 4, 3}}) {
    Chunked c;
    HostTensor k_idx(DType::i32, dims);
    c.args.k_idx = k_idx.ref();
    expect_rejects<ValueError>(c.validating(c.readings.ref()), "k_idx",
                               {"k_idx has [P, T] = " + pair_string(dims[0], dims[1]), "k_val, v, beta, g, q_idx, q_val and readings have [2, 5]",
                                "k_idx must be [P, T, W]"});
    // Without the readings (the backward's and the plan's call), the six inputs still outvote it.
    expect_rejects<ValueError>(c.validating(TensorRef{}), "k_idx", {"k_val, v, beta, g, q_idx and q_val have [2, 5]"});
  }
}

TEST(ShapeBlame, KIdxAndOneOtherTensorWrongStillBlamesKIdx) {
  Chunked c;
  HostTensor k_idx(DType::i32, {2, 6, 3}), k_val(DType::f32, {2, 6, 3});
  c.args.k_idx = k_idx.ref();
  c.args.k_val = k_val.ref();
  expect_rejects<ValueError>(c.validating(c.readings.ref()), "k_idx",
                             {"v, beta, g, q_idx, q_val and readings have [2, 5]"});
}

TEST(ShapeBlame, OneOtherWrongTensorIsBlamedOnItself) {
  {
    Chunked c;
    HostTensor q_idx(DType::i32, {2, 6, 2});
    c.args.q_idx = q_idx.ref();
    expect_rejects<ValueError>(c.validating(c.readings.ref()), "q_idx", {"[P, T, R] = [2, 5, 2]", "got [2, 6, 2]"});
  }
  {
    Chunked c;
    HostTensor v(DType::f32, {3, 5, 4});
    c.args.v = v.ref();
    expect_rejects<ValueError>(c.validating(c.readings.ref()), "v", {"[P, T, hd] = [2, 5, 4]", "got [3, 5, 4]"});
  }
  {
    Chunked c;
    HostTensor out(DType::f32, {2, 4, 4});
    expect_rejects<ValueError>(c.validating(out.ref()), "readings", {"[P, T, hd] = [2, 5, 4]"});
  }
}

TEST(ShapeBlame, ATieKeepsKIdxAsTheAnchor) {
  // k_idx, k_val, v and beta on [2, 6]; g, q_idx, q_val and the readings on [2, 5]: 4 against 4,
  // so k_idx stays the anchor and q_idx, the first tensor compared with it, is named.
  Chunked c;
  HostTensor k_idx(DType::i32, {2, 6, 3}), k_val(DType::f32, {2, 6, 3}), v(DType::f32, {2, 6, 4});
  HostTensor beta(DType::f32, {2, 6});
  c.args.k_idx = k_idx.ref();
  c.args.k_val = k_val.ref();
  c.args.v = v.ref();
  c.args.beta = beta.ref();
  expect_rejects<ValueError>(c.validating(c.readings.ref()), "q_idx", {"[P, T, R] = [2, 6, 2]"});
  // Without the readings, [2, 6] has the majority: the same.
  expect_rejects<ValueError>(c.validating(TensorRef{}), "q_idx", {"[P, T, R] = [2, 6, 2]"});
}

// W: k_idx's last dim against k_val's and a per-write g's.
TEST(ShapeBlame, AWrongWInKIdxIsBlamedOnKIdxWhenKValAndAPerWriteGAgree) {
  for (const bool decode : {false, true}) {
    ProblemSpec spec = spec_of(2, decode ? 1 : 5, 3, 2, 4, 16, 3, DType::f32, 43);  // G = W = 3
    spec.beta_3d = decode;
    const Problem pb = make_problem(spec);
    HostTensor readings = pb.make_readings(DType::f32);
    WriteReadArgs args = pb.args();
    HostTensor wide(DType::i32, {2, spec.T, 4});
    args.k_idx = wide.ref();
    WriteReadOptions options;
    options.slots_per_stream = 16;
    auto validating = [&] {
      if (decode) {
        core::validate_decode(args, readings.ref(), DecodeOptions{}, BankDTypes::engine);
      } else {
        core::validate_write_read(args, readings.ref(), options, BankDTypes::engine);
      }
    };
    expect_rejects<ValueError>(validating, "k_idx",
                               {"k_idx has W = 4 writes per token (its last dim) but k_val and g have 3",
                                decode ? "k_idx must be [..., W] with k_val's W" : "k_idx must be [P, T, W] with k_val's W"});
    // With g per token ([P, T, 1]) only k_val disagrees: a tie, k_val is named.
    HostTensor g1(DType::f32, {2, spec.T, 1});
    args.g = g1.ref();
    expect_rejects<ValueError>(validating, "k_val", {"got [2, " + std::to_string(spec.T) + ", 3]"});
  }
}

struct Decode {
  Problem pb;
  HostTensor readings;
  WriteReadArgs args;
  DecodeOptions options;
  Decode() {
    ProblemSpec spec = spec_of(3, 1, 3, 2, 5, 8, 1, DType::f32, 42);
    spec.beta_3d = true;
    pb = make_problem(spec);
    readings = pb.make_readings(DType::f32);
    args = pb.args();
  }
  std::function<void()> validating() {
    return [this] { core::validate_decode(args, readings.ref(), options, BankDTypes::engine); };
  }
};

TEST(ShapeBlame, DecodeBlamesKIdxWhenItsStreamDimsAreTheOddOnesOut) {
  for (const auto& dims : {std::vector<std::int64_t>{4, 1, 3}, std::vector<std::int64_t>{3, 2, 3}}) {
    Decode d;
    HostTensor k_idx(DType::i32, dims);
    d.args.k_idx = k_idx.ref();
    expect_rejects<ValueError>(d.validating(), "k_idx",
                               {"k_idx has leading (stream) dims = " + pair_string(dims[0], dims[1]),
                                "k_val, v, beta, g, q_idx, q_val and readings have [3, 1]", "k_idx must be [..., W]"});
  }
  // A k_idx of another rank ([3, 3]: leading dims [3]) against [3, 1, ...] everywhere else.
  Decode d;
  HostTensor flat(DType::i32, {3, 3});
  d.args.k_idx = flat.ref();
  expect_rejects<ValueError>(d.validating(), "k_idx", {"leading (stream) dims = [3]", "have [3, 1]"});
  // One other tensor off: named itself.
  Decode e;
  HostTensor q_val(DType::f32, {4, 1, 2});
  e.args.q_val = q_val.ref();
  expect_rejects<ValueError>(e.validating(), "q_val", {"[..., R]"});
}

}  // namespace
}  // namespace sdm::testing
