// Schedules: how a pass is mapped onto threads. One Schedule struct with one field list (visit)
// gives the text form, parsing and equality; the solver named by a schedule (solver.hpp) gives
// everything else: validity, search space, plans and kernel launches. The default rule (what runs
// without tuning) is default_rule.hpp.
#pragma once

#include <dfgnn/dfgnn.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dfgnn {

// The three passes of an op: forward (CSR), backward row side (CSR), backward column side (CSC).
enum class PassKind : int32_t { Forward = 0, BackwardRow = 1, BackwardCol = 2 };
const char* pass_name(PassKind pass);

// Stable, append-only ids: a removed solver leaves its id unused. Each has its name in schedule text
// (solver_name; the table in schedule.cpp), which is also its Solver::name().
enum class SolverId : int32_t { Subwarp = 1, BlockRow = 2, HubSplit = 3, Hybrid = 4, EdgeBalanced = 5 };

struct Schedule {
  SolverId solver = SolverId::Subwarp;
  int32_t lanes = 32;     // lanes per group (4, 8, 16, 32): one group per (row, head block)
  int32_t heads = 1;      // heads a group spans (a power of two dividing H and lanes), lanes / heads
                          // lanes per head: many heads of few channels fill a group as one wide head
  int32_t groups = 8;     // groups per block
  int32_t team = 1;       // groups that split one row (BlockRow), merged in shared memory
  int32_t vec = 1;        // channels per vector load (16-byte loads when vec * dtype size = 16)
  int32_t mid = 0;        // Hybrid: rows of degree >= mid use whole warps, below it `lanes` lanes
  int32_t threshold = 0;  // HubSplit, Hybrid: rows of degree >= threshold are split into chunks
  int32_t chunk = 0;      // edges: one field, two meanings, read through the names below (the
                          // text keeps "chunk", so stored schedules stay valid)

  // HubSplit, Hybrid: edges per chunk of a split row.
  int32_t split_chunk() const { return chunk; }
  // EdgeBalanced: edges per block (row groups cost at most this; longer rows are split into
  // pieces of block_edges() / groups edges).
  int32_t block_edges() const { return chunk; }
  int32_t lanes_per_head() const { return lanes / heads; }

  // The one field list: name, member and the value at which the text leaves the field out (none:
  // always written), in text order. heads is left out at 1, so texts from before it name the same
  // schedules.
  template <typename Self, typename F>
  static void visit(Self& s, F&& f) {
    constexpr std::optional<int32_t> always;
    f("lanes", s.lanes, always);
    f("heads", s.heads, std::optional<int32_t>(1));
    f("groups", s.groups, always);
    f("team", s.team, always);
    f("vec", s.vec, always);
    f("mid", s.mid, always);
    f("threshold", s.threshold, always);
    f("chunk", s.chunk, always);
  }
  bool operator==(const Schedule&) const = default;
};

const char* solver_name(SolverId id);  // "unknown" for an id without a solver
// "hub_split:lanes=32,groups=8,team=1,vec=4,mid=0,threshold=1024,chunk=512"; "subwarp:lanes=16,heads=8,..."
std::string to_string(const Schedule& s);
// Parses the text form; unknown solver, unknown or missing field, or a non-integer value is an
// Error(PARSE_ERROR) naming it. Fields may be omitted: they keep the solver's default values.
Schedule parse_schedule(const std::string& text);

// The schedules of an op direction: a forward's (`row` only) or a backward's row and column
// passes. Text: one schedule for a forward; "ROW|COL" for a backward, or one schedule for both.
struct SchedulePair {
  Schedule row;  // forward or backward row pass
  Schedule col;  // backward column pass
  bool operator==(const SchedulePair&) const = default;
};
// Error(PARSE_ERROR) naming the problem (a '|' in a forward's text included).
SchedulePair parse_schedules(dfgnn_direction_t direction, const std::string& text);
std::string to_string(dfgnn_direction_t direction, const SchedulePair& s);

// What a pass computes, as far as schedules care.
struct PassProblem {
  dfgnn_op_t op{};
  PassKind pass = PassKind::Forward;
  const dfgnn_fingerprint_t* fingerprint = nullptr;  // of the traversed structure (CSR or CSC)
  int32_t max_vec = 1;  // largest vector width the data's alignment allows (>= 1)
};

// The runtime's key bits beyond the op's shape, stored in the database's OpKey::key_bits: the
// vector-width limit (it changes validity) and whether the op has edge features (other kernels,
// other winners), packed as max_vec + kEdgeFeaturesKeyBits * edge_features.
constexpr int32_t kEdgeFeaturesKeyBits = 16;
struct KeyBits {
  int32_t max_vec = 1;
  int32_t edge_features = 0;
};
int32_t pack_key_bits(const KeyBits& bits);
int32_t pack_key_bits(const PassProblem& problem);  // its max_vec and op.edge_features
KeyBits unpack_key_bits(int32_t key_bits);  // unchecked: see row_problem for the range check

// The solvers themselves (applicability, defaults, validity, search space, plans, launches):
// solver.hpp; the default rule: default_rule.hpp.

}  // namespace dfgnn
