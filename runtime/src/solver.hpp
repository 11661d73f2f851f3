// Solvers: the ways of mapping a pass onto threads. A solver owns everything about its mapping:
// which problems it suits, its default schedule and search space (the Schedule fields it uses),
// the work lists it plans over a structure and the kernels it launches over them. Adding a solver
// is one file in solvers/, its kernel template, its tests and one line in the registry
// (solver.cpp). See docs/architecture.md.
#pragma once

#include "plan.hpp"
#include "schedule.hpp"

#include <dfgnn/dfgnn.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dfgnn {

// One kernel launch of a pass, as its solver shapes it.
struct Launch {
  static constexpr int32_t kHubList = -1;
  const char* role = "";  // what it does, for messages and tests: "rows", "warp rows", "balanced", "merge"
  std::string kernel;     // NVRTC name expression, one of the solver's kernels()
  int32_t part = 0;       // the plan part whose items it runs over, or kHubList: the merge of split rows
  int64_t grid = 0;       // blocks (0: nothing to launch)
  int32_t block = 0;      // threads per block
  size_t smem = 0;        // dynamic shared memory, bytes
  bool operator==(const Launch&) const = default;
};

class Solver {
 public:
  virtual ~Solver() = default;
  virtual SolverId id() const = 0;
  const char* name() const { return solver_name(id()); }  // in schedule text: "hub_split:lanes=..."
  // Cheap: whether any schedule of this solver suits the problem (e.g. a graph has hubs).
  virtual bool applicable(const PassProblem& problem) const = 0;
  // An always-valid schedule of this solver for the problem.
  virtual Schedule default_schedule(const PassProblem& problem) const = 0;
  // Empty when the schedule is valid for the problem, else the reason (schedules from a
  // database or the command line are checked before they are compiled). The base checks what
  // every solver shares (lanes, groups, team, vec, registers).
  virtual std::string invalid_reason(const PassProblem& problem, const Schedule& s) const;
  // The search space, lazily small: valid schedules only.
  virtual std::vector<Schedule> enumerate(const PassProblem& problem) const = 0;
  // `s`, measured on another op shape, moved onto the lane mapping (lanes, heads, vec) this
  // solver's default takes for the problem; the base keeps its threads per block and plan fields.
  // Not checked for validity (the caller does).
  virtual Schedule fit_to_shape(const PassProblem& problem, const Schedule& s) const;

  // What plan() reads: 0, every row's pointers (the default); d > 0, only the rows of degree >= d
  // (RowPointers::long_rows; a solver without work lists returns kNoRows).
  static constexpr int32_t kNoRows = 0x7fffffff;
  virtual int32_t rows_read(const Schedule&) const { return 0; }
  // Work lists of a schedule over a structure.
  virtual HostPlan plan(const RowPointers& rows, const Schedule& s) const = 0;
  // What of a schedule shapes its plan: plans are cached under this key and shared by schedules
  // that differ elsewhere. The base keys by mid, threshold and chunk.
  virtual std::string plan_key(const Schedule& s) const;
  // Every kernel a pass under the schedule may launch, in a fixed order (one module's names).
  virtual std::vector<std::string> kernels(const dfgnn_op_t& op, PassKind pass, const Schedule& s) const = 0;
  // The launches of a pass over its plan of a structure of num_rows rows, in launch order.
  virtual std::vector<Launch> launches(const dfgnn_op_t& op, PassKind pass, const Schedule& s, const HostPlan& plan,
                                       int32_t num_rows) const = 0;
};

// A solver whose passes are one rows_kernel launch over every row, with no work lists (subwarp,
// block_row): they differ only in how they map a row, which the schedule's fields carry.
class WholeRowsSolver : public Solver {
 public:
  int32_t rows_read(const Schedule&) const override { return kNoRows; }
  HostPlan plan(const RowPointers& rows, const Schedule& s) const override;
  std::vector<std::string> kernels(const dfgnn_op_t& op, PassKind pass, const Schedule& s) const override;
  std::vector<Launch> launches(const dfgnn_op_t& op, PassKind pass, const Schedule& s, const HostPlan& plan,
                               int32_t num_rows) const override;
};

// The registry.
const std::vector<const Solver*>& all_solvers();
const Solver* find_solver(SolverId id);  // null if unknown
const Solver& solver_of(const Schedule& s);  // Error(INTERNAL_ERROR) if unknown
// All valid schedules of all applicable solvers (the tuner's candidate list).
std::vector<Schedule> enumerate_schedules(const PassProblem& problem);
// Throws Error(INVALID_ARGUMENT) with the reason if the schedule is not valid for the problem.
void require_valid(const PassProblem& problem, const Schedule& s);

// Floats of one serialised pass state: NS + NV * D, from the model table (params.cuh).
int32_t state_floats(const dfgnn_op_t& op, PassKind pass);
// Registers per lane and related geometry shared by validity checks and kernel naming.
int32_t lanes_for_dim(int32_t dim, int32_t vec);
int32_t registers_per_lane(int32_t dim, int32_t lanes, int32_t vec);
// Lanes one head needs to hold D channels in vectors of vec with no idle lane (1 to 32).
int32_t lanes_per_head_for_dim(int32_t dim, int32_t vec);
// The heads a group spans by default: for H > 1 heads of D <= 32 channels, as many (a power of two
// dividing H) as fill at most a warp with lanes_per_head_for_dim lanes each; else 1.
int32_t default_group_heads(const dfgnn_op_t& op, int32_t vec);

// ---------------------------------------------------------------- shared by the solver files
namespace solvers {

constexpr int32_t kMaxTeamSharedBytes = 48 * 1024;
// The most consecutive rows without edges an edge_balanced row group holds. Its kernel splits a
// group's edges, not its rows, over the lane groups, so such rows all fall to the one lane group
// whose share holds their position and run one after another: 810 of them on cora-linqs-directed
// (uncited papers, numbered last) made GAT D = 7's forward 10.9x slower than subwarp
// (bench/results/2026-12-06d-h100.md). Longer runs are cut into groups of this many rows,
// whose blocks run side by side; mini-batch graphs end in such runs (the outer hop's nodes).
constexpr int32_t kMaxEmptyRowsInGroup = 4;
// The default hub threshold and chunk (edges) for groups of `lanes` lanes: 256 measured best on
// blogcatalog and Enron for full warps; groups of fewer lanes split at 128, which the tuner chose
// every time on R-MAT 2^20 for (8, 8) and D = 3 and 7, 1.07-1.47x faster than 256
// (bench/results/2026-12-04-shapes.md).
constexpr int32_t default_split(int32_t lanes) { return lanes < 32 ? 128 : 256; }

int64_t next_pow2(int64_t x);
int32_t max_degree(const PassProblem& p);
// The solver's schedule with the widest vector load the data allows and lanes sized to D (groups
// spanning heads where spanning_mappings has any).
Schedule base_schedule(const PassProblem& p, SolverId id);
// A group's lanes and the heads it spans.
struct LaneMapping {
  int32_t lanes, heads;
};
// The mappings whose groups span several heads, for vectors of `vec`, where default_group_heads
// spans more than one (else none): lanes_per_head_for_dim lanes a head, the default's count of
// heads (the last entry, base_schedule's mapping) or, with `every`, each power of two up to it.
std::vector<LaneMapping> spanning_mappings(const PassProblem& p, int32_t vec, bool every);
// Shared memory of one state per (group, head) of a block: team merges, parked row pieces.
int64_t group_state_bytes(const dfgnn_op_t& op, PassKind pass, const Schedule& s);
// Hub thresholds drawn from the graph's own degree distribution, clipped to [64, max degree).
std::vector<int32_t> threshold_candidates(const PassProblem& p);

// Appends the chunks of a split row (pieces of `chunk` edges) to `part` and its merge entry.
void split_row(const RowSpan& row, int32_t chunk, HostPlan& plan, HostPlan::Part& part);
// Items a part's launch covers: every row, or its segments.
int32_t part_items(const HostPlan::Part& part, int32_t num_rows);

// rows_kernel over a part: a team of `team` groups of `lanes` lanes spanning `heads` heads per
// (item, head block); teams merge in shared memory.
Launch rows_launch(const dfgnn_op_t& op, PassKind pass, const char* role, std::string kernel, int32_t part,
                   int32_t items, int32_t lanes, int32_t heads, int32_t groups, int32_t team);
// merge_kernel over the plan's split rows: 256 threads, one group of `lanes` per (hub, head block).
Launch merge_launch(const dfgnn_op_t& op, std::string kernel, const HostPlan& plan, int32_t lanes, int32_t heads);

}  // namespace solvers
}  // namespace dfgnn
