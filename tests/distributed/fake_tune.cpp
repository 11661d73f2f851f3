// dfgnn_fake_tune: one tuning run per pass of an op direction on a graph, measured on fake timings,
// stored in a tuning database through the database API (put_result), as the tuner stores a real
// run. The CPU tests of distributed tuning use it as the measurer a rank injects, so that split,
// merge, export and agreement run on real database files without a GPU.
//
//   dfgnn_fake_tune DB GRAPH MODEL DTYPE HEADS DIM DIRECTION GPU_NAME SEED
//
// GRAPH: a graph file or directory, or rmat:SCALE[:EDGES[:SEED]] (dfgnn.distributed.load_graph's
// specs). Candidates: every schedule the library lists for each pass (dfgnnListSchedules). Cost of
// a candidate: a fixed value in [0.5, 1.93) ms hashed from (GPU_NAME, fingerprint, schedule), so
// ranks of one GPU class see the same costs and another class different ones, times 5 samples of
// 0.5% log-normal noise drawn from SEED. Prints dfgnn.tune's report: a JSON list with one object
// per pass (pass, winner, winner_median_ms, default, default_median_ms, env_class).
#include "dispatch.hpp"
#include "schedule.hpp"
#include "tuning_db.hpp"

#include <dfgnn/dfgnn.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

namespace db = dfgnn::db;

void check(dfgnn_status_t s, const char* what) {
  if (s != DFGNN_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + ": " + dfgnnGetStatusString(s) + ": " + dfgnnGetLastErrorMessage());
}

// A string result of the C API's size-query protocol.
template <typename Call>
std::string text_of(Call call, const char* what) {
  size_t length = 0;
  check(call(nullptr, 0, &length), what);
  std::string out(length + 1, '\0');
  check(call(out.data(), out.size(), &length), what);
  out.resize(length);
  return out;
}

dfgnn_graph_t load(dfgnn_context_t ctx, const std::string& spec) {
  dfgnn_graph_t g = nullptr;
  dfgnn_graph_options_t options = dfgnnGraphDefaultOptions();
  if (spec.rfind("rmat:", 0) == 0) {  // rmat:SCALE[:EDGES[:SEED]], as dfgnn.distributed.load_graph
    std::vector<long long> parts;
    std::stringstream in(spec.substr(5));
    for (std::string part; std::getline(in, part, ':');) parts.push_back(std::stoll(part));
    if (parts.empty() || parts.size() > 3) throw std::runtime_error("bad graph spec " + spec);
    const int32_t scale = static_cast<int32_t>(parts[0]);
    const int64_t edges = parts.size() > 1 ? parts[1] : (16LL << scale);
    const uint64_t seed = parts.size() > 2 ? static_cast<uint64_t>(parts[2]) : 1;
    check(dfgnnGraphCreateRmat(ctx, scale, edges, 0.57, 0.19, 0.19,
                               DFGNN_RMAT_DEDUPLICATE | DFGNN_RMAT_NO_SELF_LOOPS | DFGNN_RMAT_PERMUTE_IDS, seed,
                               &options, &g),
          "generate graph");
  } else {
    check(dfgnnGraphCreateFromFile(ctx, spec.c_str(), &options, &g), "read graph");
  }
  return g;
}

dfgnn_model_t model_of(const std::string& m) {
  if (m == "gat") return DFGNN_MODEL_GAT;
  if (m == "gatv2") return DFGNN_MODEL_GATV2;
  if (m == "transformer") return DFGNN_MODEL_TRANSFORMER;
  if (m == "agnn") return DFGNN_MODEL_AGNN;
  throw std::runtime_error("unknown model " + m);
}

dfgnn_dtype_t dtype_of(const std::string& d) {
  if (d == "float32") return DFGNN_DTYPE_FLOAT32;
  if (d == "float16") return DFGNN_DTYPE_FLOAT16;
  if (d == "bfloat16") return DFGNN_DTYPE_BFLOAT16;
  throw std::runtime_error("unknown dtype " + d);
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line, sep);)
    if (!line.empty()) out.push_back(line);
  return out;
}

int run(char** argv) {
  const std::string path = argv[1], spec = argv[2], direction_text = argv[7], gpu = argv[8];
  const dfgnn_op_t op = dfgnnOpDefault(model_of(argv[3]), dtype_of(argv[4]), std::atoi(argv[5]), std::atoi(argv[6]));
  if (direction_text != "forward" && direction_text != "backward")
    throw std::runtime_error("direction must be forward or backward");
  const dfgnn_direction_t direction = direction_text == "forward" ? DFGNN_FORWARD : DFGNN_BACKWARD;
  std::mt19937_64 rng(std::stoull(argv[9]));
  std::normal_distribution<double> normal(0.0, 1.0);

  dfgnn_context_t ctx = nullptr;
  check(dfgnnCreate(&ctx), "create context");
  check(dfgnnSetDatabase(ctx, "", ""), "no database for the context");  // the run goes to DB below only
  dfgnn_graph_t g = load(ctx, spec);
  dfgnn_fingerprint_t fp;
  check(dfgnnGraphGetFingerprint(g, &fp), "fingerprint");
  const std::vector<std::string> defaults = split(
      text_of([&](char* b, size_t c, size_t* l) { return dfgnnGetSchedule(ctx, g, &op, direction, nullptr, b, c, l); },
              "default schedule"),
      '|');
  const std::vector<dfgnn::PassKind> passes =
      direction == DFGNN_FORWARD ? std::vector{dfgnn::PassKind::Forward}
                                 : std::vector{dfgnn::PassKind::BackwardRow, dfgnn::PassKind::BackwardCol};
  if (defaults.size() != passes.size()) throw std::runtime_error("unexpected default schedule text");

  db::TuningDb::Options options;
  options.validator = dfgnn::row_problem;
  auto database = db::TuningDb::open_user(path, options);
  const db::EnvironmentInfo env{gpu, 90, 132, 12040, 12080, dfgnnGetVersion(), "fake-tune"};
  nlohmann::json report = nlohmann::json::array();
  for (size_t i = 0; i < passes.size(); ++i) {
    const int pass = static_cast<int>(passes[i]);
    std::vector<std::string> candidates = split(
        text_of([&](char* b, size_t c, size_t* l) { return dfgnnListSchedules(ctx, g, &op, pass, b, c, l); },
                "list schedules"),
        '\n');
    db::TuningRun run;
    run.environment = env;
    run.op = dfgnn::op_key(op, passes[i], 4);
    run.fingerprint = dfgnn::db_fingerprint(fp);
    run.default_schedule = defaults[i];
    bool has_default = false;
    for (const std::string& c : candidates) has_default = has_default || c == defaults[i];
    if (!has_default) candidates.push_back(defaults[i]);
    for (const std::string& c : candidates) {
      const size_t h = std::hash<std::string>{}(gpu + "/" + std::to_string(fp.num_edges) + "/" + c);
      const double cost = 0.5 + static_cast<double>(h % 1000) / 700.0;
      std::vector<double> samples;
      for (int s = 0; s < 5; ++s) samples.push_back(cost * std::exp(0.005 * normal(rng)));
      run.candidates.push_back(
          db::summarize_samples(c, static_cast<int32_t>(dfgnn::parse_schedule(c).solver), samples));
    }
    run.tool_version = "dfgnn_fake_tune";
    const std::optional<db::TuningResult> result = database->put_result(run);
    if (!result) throw std::runtime_error("no eligible candidate");
    report.push_back({{"pass", dfgnn::pass_name(passes[i])},
                      {"winner", result->schedule},
                      {"winner_median_ms", result->stats.median_ms},
                      {"default", result->default_schedule},
                      {"default_median_ms", result->default_median_ms},
                      {"env_class", result->env_class}});
  }
  dfgnnGraphDestroy(g);
  dfgnnDestroy(ctx);
  std::puts(report.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 10) {
    std::fprintf(stderr, "usage: dfgnn_fake_tune DB GRAPH MODEL DTYPE HEADS DIM DIRECTION GPU_NAME SEED\n");
    return 2;
  }
  try {
    return run(argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dfgnn_fake_tune: %s\n", e.what());
    return 1;
  }
}
