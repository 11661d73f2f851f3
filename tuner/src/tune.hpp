// Tuning a pass on the GPU: candidates from the solvers, measured through search() (search.hpp)
// by a Measurer that compiles ahead on CPU threads, checks every candidate's output against the
// default schedule's output, and times launches with CUDA events on rotated inputs. Winners and
// per-candidate statistics go to the context's tuning database.
#pragma once

#include <dfgnn/dfgnn.h>

#include "schedule.hpp"
#include "search.hpp"

#include <map>
#include <optional>
#include <string>

namespace dfgnn {

class Graph;
struct Context;

struct PassTuning {
  PassKind pass = PassKind::Forward;
  tuner::SearchResult search;
  Schedule winner;
  // Per candidate text: medians of its two clocks: one isolated call with the host's work in it,
  // and GPU time per call of calls replayed from a CUDA graph (the score; 0 where capture failed).
  struct Regimes {
    double isolated_ms = 0.0, gpu_ms = 0.0;
  };
  std::map<std::string, Regimes> regimes;
  // What dispatch answered before this tuning from the databases (empty: none, the default rule
  // answered), and where it came from (describe_origin); measured right after the default.
  std::string incumbent, incumbent_origin;
  int compile_threads = 0;    // threads compiling candidates ahead of the race (0: inline)
  bool stored = false;        // written to the user database
  std::string store_error;    // why not, when !stored
};

// Threads compiling candidates ahead of the race: one less than the cores, 1 to 8, unless
// DFGNN_TUNE_COMPILE_THREADS says (0: each compile inline, when the race reaches its candidate;
// anything but a whole number from 0 to 64 is logged and ignored).
int compile_threads();

// Tunes one pass within budget_s seconds. Throws NO_DEVICE without a GPU.
PassTuning tune_pass(Context& ctx, const Graph& graph, const dfgnn_op_t& op, PassKind pass, int32_t max_vec,
                     double budget_s);

// JSON summary of a pass tuning (winner, default, speedup, runner-up, counts, reason); with_timed
// adds every timed candidate's score and both clocks' medians ("timed").
std::string describe(const PassTuning& t, bool with_timed = false);

}  // namespace dfgnn
