#include "golden.hpp"

#include <stdexcept>

#include "json.hpp"

namespace sdm::testing {

namespace {

// Appends the numbers of a nested JSON array to `values` in row-major order, checking that
// the nesting matches `dims` from dimension `d` on.
void flatten(const Json& json, const std::vector<std::int64_t>& dims, std::size_t d, std::vector<double>& values,
             const std::string& name) {
  if (d == dims.size()) {
    values.push_back(json.number());
    return;
  }
  const auto& items = json.array();
  if (static_cast<std::int64_t>(items.size()) != dims[d]) {
    throw std::runtime_error("golden: " + name + " has " + std::to_string(items.size()) + " entries in dim " +
                             std::to_string(d) + ", expected " + std::to_string(dims[d]));
  }
  for (const Json& item : items) flatten(item, dims, d + 1, values, name);
}

HostTensor tensor(const Json& json, DType dtype, std::vector<std::int64_t> dims, const std::string& name) {
  std::vector<double> values;
  flatten(json, dims, 0, values, name);
  HostTensor out(dtype, std::move(dims));
  for (std::size_t i = 0; i < values.size(); ++i) out.set(static_cast<std::int64_t>(i), values[i]);
  return out;
}

GoldenCase load_case(const Json& c) {
  GoldenCase gc;
  gc.name = c["name"].string();
  ProblemSpec& s = gc.problem.spec;
  s.P = c["P"].integer();
  s.T = c["T"].integer();
  s.W = c["W"].integer();
  s.R = c["R"].integer();
  s.hd = c["hd"].integer();
  s.slots_per_stream = c["slots_per_stream"].integer();
  s.G = c["G"].integer();
  s.bank = DType::f64;
  s.index = DType::i64;
  s.input = DType::f64;

  const std::int64_t S = s.P * s.slots_per_stream;
  const std::vector<std::int64_t> bank{S, s.hd}, writes{s.P, s.T, s.W}, reads{s.P, s.T, s.R};
  const std::vector<std::int64_t> values{s.P, s.T, s.hd}, tokens{s.P, s.T}, decays{s.P, s.T, s.G};
  const Json& in = c["inputs"];
  const std::string at = gc.name + ".";
  Problem& pb = gc.problem;
  pb.memory = tensor(in["M0"], DType::f64, bank, at + "inputs.M0");
  pb.k_idx = tensor(in["kidx"], DType::i64, writes, at + "inputs.kidx");
  pb.k_val = tensor(in["kval"], DType::f64, writes, at + "inputs.kval");
  pb.v = tensor(in["v"], DType::f64, values, at + "inputs.v");
  pb.beta = tensor(in["beta"], DType::f64, tokens, at + "inputs.beta");
  pb.g = tensor(in["g"], DType::f64, decays, at + "inputs.g");
  pb.q_idx = tensor(in["qidx"], DType::i64, reads, at + "inputs.qidx");
  pb.q_val = tensor(in["qval"], DType::f64, reads, at + "inputs.qval");

  const Json& weights = c["loss_weights"];
  gc.weight_readings = tensor(weights["readings"], DType::f64, values, at + "loss_weights.readings");
  gc.weight_final_bank = tensor(weights["final_bank"], DType::f64, bank, at + "loss_weights.final_bank");

  const Json& expected = c["expected"];
  gc.readings = tensor(expected["readings"], DType::f64, values, at + "expected.readings");
  gc.final_bank = tensor(expected["final_bank"], DType::f64, bank, at + "expected.final_bank");
  const Json& grad = expected["grad"];
  gc.grad_memory = tensor(grad["M0"], DType::f64, bank, at + "expected.grad.M0");
  gc.grad_k_val = tensor(grad["kval"], DType::f64, writes, at + "expected.grad.kval");
  gc.grad_v = tensor(grad["v"], DType::f64, values, at + "expected.grad.v");
  gc.grad_beta = tensor(grad["beta"], DType::f64, tokens, at + "expected.grad.beta");
  gc.grad_g = tensor(grad["g"], DType::f64, decays, at + "expected.grad.g");
  gc.grad_q_val = tensor(grad["qval"], DType::f64, reads, at + "expected.grad.qval");
  return gc;
}

}  // namespace

std::string golden_path() { return std::string(SDM_TEST_DATA_DIR) + "/golden_f64.json"; }

std::vector<GoldenCase> load_golden_cases(const std::string& path) {
  const Json root = Json::parse_file(path);
  if (root["format"].integer() != 1) {
    throw std::runtime_error("golden: " + path + " has format " + std::to_string(root["format"].integer()) +
                             ", expected 1");
  }
  std::vector<GoldenCase> cases;
  for (const Json& c : root["cases"].array()) cases.push_back(load_case(c));
  return cases;
}

}  // namespace sdm::testing
