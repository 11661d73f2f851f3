// Plans: the per-(graph, structure, schedule) work lists that a pass launches over, built once on
// the host, uploaded once, cached on the graph and reused across layers and epochs.
#pragma once

#include "cuda.hpp"
#include "schedule.hpp"

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace dfgnn {

struct Compressed;
class Graph;

// A row of the traversed structure: its edges are [begin, end).
struct RowSpan {
  int32_t row = 0, begin = 0, end = 0;
  bool operator==(const RowSpan&) const = default;
};

// What a plan reads of the traversed structure (CSR or CSC), as its solver asks (Solver::rows_read):
// every row's pointers (row i holds edges [ptr[i], ptr[i + 1])), or only the rows of at least a given
// degree, in ascending order. Nothing else, so a planner can be fed from host or device arrays, and
// a device-built graph sends the host only what the planner reads.
struct RowPointers {
  const int32_t* ptr = nullptr;    // [rows + 1]; null when only long rows are read
  int32_t rows = 0;
  std::vector<RowSpan> long_rows;  // when ptr is null: the rows of degree >= rows_read()
  int32_t begin(int32_t row) const { return ptr[row]; }
  int32_t end(int32_t row) const { return ptr[row + 1]; }
  int32_t degree(int32_t row) const { return ptr[row + 1] - ptr[row]; }
};

// The rows of `ptr` (rows + 1 entries) of degree >= min_degree, ascending.
std::vector<RowSpan> long_rows_of(const int32_t* ptr, int32_t rows, int32_t min_degree);

// (node, begin, end, slot): edges [begin, end) of node's row; slot >= 0 marks a chunk of a split
// row whose partial state goes to partial slot `slot`. For merge lists: (node, first slot, count, 0).
using Segment = std::array<int32_t, 4>;

struct HostPlan {
  static constexpr int32_t kNoLimit = 0x7fffffff;
  // One launch of a pass over a part of the structure's rows.
  struct Part {
    enum class Kind : int32_t {
      // rows_kernel: lane groups over every row whose degree lies in [min_degree, max_degree) (no
      // list: groups of other rows exit at once), so a plan stores only its chunks.
      Rows,
      // The same rows on whole warps (hybrid's middle bin, beside its narrower groups' Rows part).
      WarpRows,
      // rows_kernel: lane groups over `segments`, the chunks of split rows.
      Chunks,
      // balanced_kernel: one block per segment (first row, end row, first edge, end edge) of
      // consecutive rows.
      RowGroups,
    };
    Kind kind = Kind::Rows;
    int32_t lanes = 32;  // lanes per group of the kernel that runs it
    int32_t min_degree = 0;
    int32_t max_degree = kNoLimit;
    std::vector<Segment> segments = {};  // Chunks, RowGroups
    // Whether the launch reads `segments` (else it runs over every row, by degree).
    bool listed() const { return kind == Kind::Chunks || kind == Kind::RowGroups; }
  };
  std::vector<Part> parts;
  std::vector<Segment> hubs;  // split rows to merge
  int32_t num_slots = 0;      // partial states per head
};

// Work lists for a schedule over a structure (CSR or CSC), as the schedule's solver plans them
// (Solver::plan). Hand-checkable: see tests/cpu/test_plan.cpp.
HostPlan make_plan(const Compressed& structure, const Schedule& schedule);
// What a solver reading `rows_read` (Solver::rows_read) gets of a host structure.
RowPointers plan_rows(const Compressed& structure, int32_t rows_read);

// A plan plus its device copies (uploaded on first use).
class Plan {
 public:
  explicit Plan(HostPlan host) : host_(std::move(host)) {}
  const HostPlan& host() const { return host_; }
  struct Device {
    std::vector<DeviceBuffer> parts;  // one per host part (an empty buffer where it has no list)
    DeviceBuffer hubs;
  };
  const Device& device() const;

 private:
  HostPlan host_;
  mutable std::once_flag uploaded_;
  mutable Device device_;
};

// The plan of a schedule on the graph's CSR (forward, backward row pass) or CSC (column pass),
// cached on the graph.
std::shared_ptr<const Plan> get_plan(const Graph& graph, PassKind pass, const Schedule& schedule);

}  // namespace dfgnn
