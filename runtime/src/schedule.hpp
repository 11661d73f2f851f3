// Schedules (how a pass is mapped onto threads) and the solvers that own them. One Schedule
// struct with one field list (visit) gives the text form, parsing, equality and the kernel
// specialisation; each solver declares its own applicability, default, validity check and
// search space (the tuner enumerates it).
#pragma once

#include <dfgnn/dfgnn.h>

#include <cstdint>
#include <string>
#include <vector>

namespace dfgnn {

// The three passes of an op: forward (CSR), backward row side (CSR), backward column side (CSC).
enum class PassKind : int32_t { Forward = 0, BackwardRow = 1, BackwardCol = 2 };
const char* pass_name(PassKind pass);

// Stable, append-only ids: a removed solver leaves its id unused.
enum class SolverId : int32_t { Subwarp = 1, BlockRow = 2, HubSplit = 3, Hybrid = 4, EdgeBalanced = 5 };

struct Schedule {
  SolverId solver = SolverId::Subwarp;
  int32_t lanes = 32;     // lanes per group (4, 8, 16, 32): one group per (row, head)
  int32_t groups = 8;     // groups per block
  int32_t team = 1;       // groups that split one row (BlockRow), merged in shared memory
  int32_t vec = 1;        // channels per vector load (16-byte loads when vec * dtype size = 16)
  int32_t mid = 0;        // Hybrid: rows of degree >= mid use whole warps, below it `lanes` lanes
  int32_t threshold = 0;  // HubSplit, Hybrid: rows of degree >= threshold are split into chunks
  int32_t chunk = 0;      // HubSplit, Hybrid: edges per chunk of a split row; EdgeBalanced: edges
                          // per block (longer rows are split into pieces of chunk / groups edges)

  // The one field list: name and member, in text order.
  template <typename Self, typename F>
  static void visit(Self& s, F&& f) {
    f("lanes", s.lanes);
    f("groups", s.groups);
    f("team", s.team);
    f("vec", s.vec);
    f("mid", s.mid);
    f("threshold", s.threshold);
    f("chunk", s.chunk);
  }
  bool operator==(const Schedule&) const = default;
};

const char* solver_name(SolverId id);
// "hub_split:lanes=32,groups=8,team=1,vec=4,mid=0,threshold=1024,chunk=512"
std::string to_string(const Schedule& s);
// Parses the text form; unknown solver, unknown or missing field, or a non-integer value is an
// Error(PARSE_ERROR) naming it. Fields may be omitted: they keep the solver's default values.
Schedule parse_schedule(const std::string& text);

// What a pass computes, as far as schedules care.
struct PassProblem {
  dfgnn_op_t op{};
  PassKind pass = PassKind::Forward;
  const dfgnn_fingerprint_t* fingerprint = nullptr;  // of the traversed structure (CSR or CSC)
  int32_t max_vec = 1;  // largest vector width the data's alignment allows (>= 1)
};

class Solver {
 public:
  virtual ~Solver() = default;
  virtual SolverId id() const = 0;
  // Cheap: whether any schedule of this solver suits the problem (e.g. a graph has hubs).
  virtual bool applicable(const PassProblem& problem) const = 0;
  // An always-valid schedule of this solver for the problem.
  virtual Schedule default_schedule(const PassProblem& problem) const = 0;
  // Empty when the schedule is valid for the problem, else the reason (schedules from a
  // database or the command line are checked before they are compiled).
  virtual std::string invalid_reason(const PassProblem& problem, const Schedule& s) const;
  // The search space, lazily small: valid schedules only.
  virtual std::vector<Schedule> enumerate(const PassProblem& problem) const = 0;
};

const std::vector<const Solver*>& all_solvers();
const Solver* find_solver(SolverId id);  // null if unknown

// Rule used without tuning: hub split (rows of >= 256 edges cut into 256-edge chunks) where the
// traversed structure has such rows, else the sub-warp mapping sized to D.
Schedule default_schedule(const PassProblem& problem);
// All valid schedules of all applicable solvers (the tuner's candidate list).
std::vector<Schedule> enumerate_schedules(const PassProblem& problem);
// Throws Error(INVALID_ARGUMENT) with the reason if the schedule is not valid for the problem.
void require_valid(const PassProblem& problem, const Schedule& s);

// Floats of one serialised pass state: NS + NV * D of the pass in kernel_templates/passes.cuh.
int32_t state_floats(const dfgnn_op_t& op, PassKind pass);
// Registers per lane and related geometry shared by validity checks and kernel naming.
int32_t lanes_for_dim(int32_t dim, int32_t vec);
int32_t registers_per_lane(int32_t dim, int32_t lanes, int32_t vec);

}  // namespace dfgnn
