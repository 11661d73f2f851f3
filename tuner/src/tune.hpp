// Tuning a pass on the GPU: candidates from the solvers, measured through search() (search.hpp)
// by a Measurer that compiles ahead on CPU threads, checks every candidate's output against the
// default schedule's output, and times launches with CUDA events on rotated inputs. Winners and
// per-candidate statistics go to the context's tuning database.
#pragma once

#include <dfgnn/dfgnn.h>

#include "schedule.hpp"
#include "search.hpp"

#include <optional>
#include <string>

namespace dfgnn {

class Graph;
struct Context;

struct PassTuning {
  PassKind pass = PassKind::Forward;
  tuner::SearchResult search;
  Schedule winner;
  bool stored = false;        // written to the user database
  std::string store_error;    // why not, when !stored
};

// Tunes one pass within budget_s seconds. Throws NO_DEVICE without a GPU.
PassTuning tune_pass(Context& ctx, const Graph& graph, const dfgnn_op_t& op, PassKind pass, int32_t max_vec,
                     double budget_s);

// JSON summary of a pass tuning (winner, default, speedup, runner-up, counts, reason).
std::string describe(const PassTuning& t);

}  // namespace dfgnn
