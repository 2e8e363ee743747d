// sdm_bench - the benchmark runner of the CPU engine.
//
//   sdm_bench [--config tiny|small|mid[,...]] [--pass fwd|fwd_save|fwd_bwd|decode|all[,...]]
//             [--threads N] [--bank bf16|f32] [--snapshot none|bf16|fp8|int4]
//             [--validate on|off] [--chunk C] [--repeat N] [--warmup N] [--copy-mib N]
//             [--json FILE] [--digest on|off]
//
// Measures the DRAM copy bandwidth with the same thread count first, then times each
// (config, pass): the median of --repeat runs after --warmup untimed runs. Prints a
// markdown table (config, chunk size, pass, bank, threads, ms, tokens/s, bytes moved,
// GB/s, fraction of the copy bandwidth, CPU time / wall time) and, with --json, writes the
// same rows as JSON. The bytes are the minimum each pass must move (bench_passes.cpp).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench_config.hpp"
#include "bench_inputs.hpp"
#include "bench_passes.hpp"
#include "copy_bandwidth.hpp"
#include "sdm/error.hpp"
#include "sdm/options.hpp"

namespace sdm::bench {
namespace {

struct Cli {
  std::vector<std::string> configs = {"small"};
  std::vector<Pass> passes = all_passes();
  DType bank = DType::bf16;
  PassSettings settings;
  std::size_t copy_mib = 512;
  int chunk = 0;  // > 0: overrides the configs' chunk size C
  std::string json;
};

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream stream(s);
  for (std::string item; std::getline(stream, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

int parse_positive(const std::string& flag, const std::string& value, int minimum) {
  std::size_t used = 0;
  int n = 0;
  try {
    n = std::stoi(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value.size() || n < minimum) {
    throw std::invalid_argument(flag + " needs an integer >= " + std::to_string(minimum) + ", got \"" + value + "\"");
  }
  return n;
}

void print_usage() {
  std::puts(
      "usage: sdm_bench [--config tiny|small|mid[,...]] [--pass fwd|fwd_save|fwd_bwd|decode|all[,...]]\n"
      "                 [--threads N] [--bank bf16|f32] [--snapshot none|bf16|fp8|int4]\n"
      "                 [--validate on|off] [--chunk C] [--repeat N] [--warmup N] [--copy-mib N]\n"
      "                 [--json FILE] [--digest on|off]");
}

Cli parse_cli(int argc, char** argv) {
  Cli cli;
  cli.settings.threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      print_usage();
      std::exit(0);
    }
    if (i + 1 >= argc) throw std::invalid_argument(flag + " needs a value (see --help)");
    const std::string value = argv[++i];
    if (flag == "--config") {
      cli.configs = split_list(value);
      for (const auto& name : cli.configs) find_config(name);
    } else if (flag == "--pass") {
      cli.passes.clear();
      for (const auto& name : split_list(value)) {
        if (name == "all") {
          cli.passes = all_passes();
        } else {
          cli.passes.push_back(parse_pass(name));
        }
      }
    } else if (flag == "--threads") {
      cli.settings.threads = parse_positive(flag, value, 1);
    } else if (flag == "--bank") {
      if (value != "bf16" && value != "f32") throw std::invalid_argument("--bank must be bf16 or f32, got \"" + value + "\"");
      cli.bank = value == "bf16" ? DType::bf16 : DType::f32;
    } else if (flag == "--snapshot") {
      cli.settings.snapshot = parse_snapshot_quant(value);
    } else if (flag == "--validate") {
      if (value != "on" && value != "off") throw std::invalid_argument("--validate must be on or off, got \"" + value + "\"");
      cli.settings.validate = value == "on";
    } else if (flag == "--chunk") {
      cli.chunk = parse_positive(flag, value, 1);
    } else if (flag == "--repeat") {
      cli.settings.repeat = parse_positive(flag, value, 1);
    } else if (flag == "--warmup") {
      cli.settings.warmup = parse_positive(flag, value, 0);
    } else if (flag == "--copy-mib") {
      cli.copy_mib = static_cast<std::size_t>(parse_positive(flag, value, 1));
    } else if (flag == "--digest") {
      if (value != "on" && value != "off") throw std::invalid_argument("--digest must be on or off, got \"" + value + "\"");
      cli.settings.digest = value == "on";
    } else if (flag == "--json") {
      cli.json = value;
    } else {
      throw std::invalid_argument("unknown option " + flag + " (see --help)");
    }
  }
  if (cli.passes.empty()) throw std::invalid_argument("--pass lists no pass");
  return cli;
}

struct Row {
  BenchConfig config;
  Pass pass;
  PassResult timing;
  double bytes = 0.0;
  double tokens_per_s = 0.0, gb_per_s = 0.0, fraction = 0.0;
};

std::string json_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out;
}

void write_json(const std::string& path, const Cli& cli, const CopyBandwidth& copy, const std::vector<Row>& rows) {
  std::ofstream out(path);
  if (!out) throw std::runtime_error("cannot open --json file \"" + path + "\"");
  out.precision(9);
  out << "{\n  \"copy_bandwidth\": {\"gb_per_s\": " << copy.gb_per_s << ", \"buffer_bytes\": " << copy.buffer_bytes
      << ", \"threads\": " << copy.threads << ", \"trials\": " << copy.trials << "},\n  \"results\": [";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const BenchConfig& c = r.config;
    out << (i ? ",\n" : "\n") << "    {\"config\": \"" << json_escape(c.name) << "\", \"pass\": \"" << pass_name(r.pass)
        << "\", \"bank\": \"" << (cli.bank == DType::bf16 ? "bf16" : "f32") << "\", \"snapshot\": \""
        << snapshot_quant_name(cli.settings.snapshot) << "\", \"validate\": " << (cli.settings.validate ? "true" : "false")
        << ", \"threads\": " << cli.settings.threads << ", \"hd\": " << c.hd << ", \"slots_per_stream\": "
        << c.slots_per_stream << ", \"W\": " << c.W << ", \"R\": " << c.R << ", \"P\": " << c.P << ", \"T\": " << c.T
        << ", \"C\": " << c.C << ", \"G\": " << c.G << ", \"ms_median\": " << r.timing.median_ms << ", \"ms\": [";
    for (std::size_t k = 0; k < r.timing.ms.size(); ++k) out << (k ? ", " : "") << r.timing.ms[k];
    out << "], \"tokens_per_s\": " << r.tokens_per_s << ", \"bytes\": " << r.bytes << ", \"gb_per_s\": " << r.gb_per_s
        << ", \"fraction_of_copy\": " << r.fraction << ", \"cpu_per_wall\": " << r.timing.cpu_per_wall << "}";
  }
  out << "\n  ]\n}\n";
}

int run(int argc, char** argv) {
  const Cli cli = parse_cli(argc, argv);
  // The decode step takes its thread count from the environment (DecodeOptions has none).
  setenv("SDM_NUM_THREADS", std::to_string(cli.settings.threads).c_str(), 1);
  const CopyBandwidth copy = measure_copy_bandwidth(cli.copy_mib << 20, cli.settings.threads, 5);
  std::printf("copy bandwidth: %.2f GB/s (memcpy of %zu MiB, %d threads, best of %d, read + write bytes)\n\n",
              copy.gb_per_s, cli.copy_mib, copy.threads, copy.trials);
  std::printf("| config | C | pass | bank | threads | ms | tokens/s | bytes moved (MB) | GB/s | fraction of copy | CPU/wall |\n");
  std::printf("|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
  std::fflush(stdout);

  std::vector<Row> rows;
  for (const auto& name : cli.configs) {
    BenchConfig config = find_config(name);
    if (cli.chunk > 0) config.C = cli.chunk;
    const BenchInputs inputs = make_bench_inputs(config, cli.bank, 1234);
    for (Pass pass : cli.passes) {
      Row row{config, pass, run_pass(inputs, pass, cli.settings)};
      row.bytes = pass_bytes(config, cli.bank, pass, cli.settings.snapshot);
      const double seconds = row.timing.median_ms / 1e3;
      row.tokens_per_s = static_cast<double>(config.P * config.T) / seconds;
      row.gb_per_s = row.bytes / seconds / 1e9;
      row.fraction = row.gb_per_s / copy.gb_per_s;
      std::printf("| %s | %ld | %s | %s | %d | %.2f | %.0f | %.1f | %.2f | %.3f | %.2f |\n", config.name.c_str(),
                  static_cast<long>(config.C), pass_name(pass), cli.bank == DType::bf16 ? "bf16" : "f32", cli.settings.threads,
                  row.timing.median_ms, row.tokens_per_s, row.bytes / 1e6, row.gb_per_s, row.fraction,
                  row.timing.cpu_per_wall);
      std::fflush(stdout);
      rows.push_back(row);
    }
  }
  if (!cli.json.empty()) write_json(cli.json, cli, copy, rows);
  return 0;
}

}  // namespace
}  // namespace sdm::bench

int main(int argc, char** argv) {
  try {
    return sdm::bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sdm_bench: %s\n", e.what());
    return 1;
  }
}
