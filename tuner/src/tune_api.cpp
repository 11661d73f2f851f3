// C entry point of the tuner, and the tuning hook that dispatch calls on a miss when the context's
// tune mode is DFGNN_TUNE_ON_MISS.
#include "dispatch.hpp"
#include "env_number.hpp"
#include "handles.hpp"
#include "logging.hpp"
#include "ops.hpp"
#include "tune.hpp"

#include <cstdlib>

namespace dfgnn {
namespace {

// Seconds a pass may take when tuned on a dispatch miss (DFGNN_TUNE_BUDGET, default 20).
double miss_budget() {
  if (const char* v = std::getenv("DFGNN_TUNE_BUDGET")) {
    if (const std::optional<double> s = parse_env_number(v); s && *s > 0) return *s;
    log().warn("DFGNN_TUNE_BUDGET='{}' is not a positive number of seconds; using 20", v);
  }
  return 20.0;
}

class GpuTuningHook final : public TuningHook {
 public:
  std::optional<Schedule> tune(Context& ctx, const Graph& graph, const dfgnn_op_t& op, PassKind pass,
                               int32_t max_vec) override {
    try {
      const PassTuning t = tune_pass(ctx, graph, op, pass, max_vec, miss_budget());
      if (!t.search.found) return std::nullopt;
      log().info("tuned {} on a dispatch miss: {}", pass_name(pass), describe(t));
      return t.winner;
    } catch (const std::exception& e) {
      log().warn("tuning on a dispatch miss failed, using the default rule: {}", e.what());
      return std::nullopt;
    }
  }
};

// Registered when the library loads (this file is always linked into libdfgnn).
[[maybe_unused]] const bool registered = [] {
  register_tuning_hook(std::make_shared<GpuTuningHook>());
  return true;
}();

}  // namespace
}  // namespace dfgnn

using namespace dfgnn;

extern "C" dfgnn_status_t dfgnnTune(dfgnn_context_t ctx, dfgnn_graph_t graph, const dfgnn_op_t* op,
                                    dfgnn_direction_t direction, double budget_seconds, char* report,
                                    size_t capacity, size_t* length) {
  return guard([&] {
    Context& c = context_of(ctx);
    const Graph& g = graph_of(graph);
    const dfgnn_op_t& o = op_of(op);
    if (direction != DFGNN_FORWARD && direction != DFGNN_BACKWARD)
      fail(DFGNN_STATUS_INVALID_ARGUMENT, "direction {} is neither DFGNN_FORWARD nor DFGNN_BACKWARD", static_cast<int>(direction));
    if (!(budget_seconds > 0)) fail(DFGNN_STATUS_INVALID_ARGUMENT, "budget_seconds must be positive (got {})", budget_seconds);
    choose_schedules(c, g, o, direction, nullptr, any_alignment(o));  // validates the op for this graph
    require_device("dfgnnTune");
    std::vector<PassKind> passes{PassKind::Forward};
    if (direction == DFGNN_BACKWARD) passes = {PassKind::BackwardRow, PassKind::BackwardCol};
    std::string text = "[";
    for (size_t k = 0; k < passes.size(); ++k) {
      const PassTuning t = tune_pass(c, g, o, passes[k], any_alignment(o), budget_seconds / passes.size());
      if (k > 0) text += ",";
      text += describe(t, /*with_timed=*/true);
    }
    text += "]";
    write_text(text, report, capacity, length);
  });
}
