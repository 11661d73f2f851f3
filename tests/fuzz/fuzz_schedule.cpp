// Schedule text (parse_schedule) and the solvers' validity checks on what it yields.
// Input: 4 bytes choose a problem (model, dtype, heads, D up to 4096, pass, alignment, graph
// shape), the rest is the schedule text. Properties: a parsed schedule prints to text that parses
// back to the same schedule (and prints identically); a parse failure is a PARSE_ERROR with a
// message; the validity check never throws anything but INVALID_ARGUMENT and answers the same
// twice; every enumerated candidate and the default rule's schedule are valid for the problem; a
// valid schedule's plan over a small graph with a hub stays inside that graph (every chunk inside its
// row, every row group on the row pointers, every merge inside the partial slots), and its launches
// are computed without any error but a dfgnn one. (Chunks past 2^31 edges once stepped in 32 bits:
// hub_split and edge_balanced planned negative edge bounds.)
#include "fuzz_util.hpp"

#include "default_rule.hpp"
#include "error.hpp"
#include "graph.hpp"
#include "plan.hpp"
#include "schedule.hpp"
#include "solver.hpp"

#include <memory>
#include <string>
#include <vector>

namespace {

dfgnn_fingerprint_t shape(int kind) {
  dfgnn_fingerprint_t fp{};
  fp.version = DFGNN_FINGERPRINT_VERSION;
  switch (kind) {
    case 0: break;  // empty graph
    case 1: fp.num_nodes = 2708; fp.num_edges = 10556; fp.mean_degree = 3.9; fp.max_degree = 168;
            fp.p50 = 3; fp.p90 = 8; fp.p99 = 30; fp.p999 = 80; break;  // cora-like
    case 2: fp.num_nodes = 10312; fp.num_edges = 667966; fp.mean_degree = 64.8; fp.max_degree = 3992;
            fp.p50 = 21; fp.p90 = 160; fp.p99 = 900; fp.p999 = 2500; fp.hub_rows[0] = 2000; break;  // hubs
    default: fp.num_nodes = 1 << 20; fp.num_edges = 17000000; fp.mean_degree = 16.2; fp.max_degree = 41457;
             fp.p50 = 3; fp.p90 = 30; fp.p99 = 300; fp.p999 = 3000; break;  // R-MAT-like
  }
  return fp;
}

// 300 nodes: each has one source, but the last, a hub whose sources are all the others (its row
// starts past edge 0, so a chunk's end can pass 2^31).
const dfgnn::Graph& hub_graph() {
  static const std::unique_ptr<dfgnn::Graph> g = [] {
    constexpr int32_t n = 300;
    std::vector<int32_t> ptr{0}, col;
    for (int32_t i = 0; i + 1 < n; ++i) col.push_back(i + 1), ptr.push_back(static_cast<int32_t>(col.size()));
    for (int32_t i = 0; i + 1 < n; ++i) col.push_back(i);
    ptr.push_back(static_cast<int32_t>(col.size()));
    return dfgnn::Graph::from_csr(n, static_cast<int64_t>(col.size()), ptr.data(), col.data(), DFGNN_INDEX_INT32,
                                  dfgnnGraphDefaultOptions());
  }();
  return *g;
}

// The plan of a valid schedule stays inside the structure it was made for.
void check_plan(const dfgnn::PassProblem& problem, const dfgnn::Schedule& s) {
  const dfgnn::Compressed& csr = hub_graph().csr();
  const dfgnn::HostPlan plan = dfgnn::make_plan(csr, s);
  const std::string what = dfgnn::to_string(s);
  for (const dfgnn::HostPlan::Part& part : plan.parts)
    for (const dfgnn::Segment& seg : part.segments) {
      if (part.kind == dfgnn::HostPlan::Part::Kind::RowGroups) {  // (first row, end row, first edge, end edge)
        FUZZ_CHECK(0 <= seg[0] && seg[0] < seg[1] && seg[1] <= csr.num_rows, "row group outside the rows: " + what);
        FUZZ_CHECK(seg[2] == csr.ptr[seg[0]] && seg[3] == csr.ptr[seg[1]], "row group off its rows' edges: " + what);
      } else {  // a chunk (row, begin, end, slot) of a split row
        FUZZ_CHECK(0 <= seg[0] && seg[0] < csr.num_rows, "chunk of no row: " + what);
        FUZZ_CHECK(csr.ptr[seg[0]] <= seg[1] && seg[1] < seg[2] && seg[2] <= csr.ptr[seg[0] + 1],
                   "chunk outside its row: " + what);
        FUZZ_CHECK(0 <= seg[3] && seg[3] < plan.num_slots, "chunk without a partial slot: " + what);
      }
    }
  for (const dfgnn::Segment& hub : plan.hubs)
    FUZZ_CHECK(hub[1] >= 0 && hub[2] > 0 && int64_t{hub[1]} + hub[2] <= plan.num_slots, "merge outside the slots: " + what);
  try {
    for (const dfgnn::Launch& l : dfgnn::solver_of(s).launches(problem.op, problem.pass, s, plan, csr.num_rows))
      FUZZ_CHECK(l.grid >= 0 && l.block > 0, "launch of no threads: " + what);
  } catch (const dfgnn::Error&) {
    // a launch the device could not take is an error with its status; anything else escapes and fails
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const dfgnn_model_t model = static_cast<dfgnn_model_t>(data[0] % 4);
  const dfgnn_dtype_t dtype = static_cast<dfgnn_dtype_t>((data[0] >> 2) % 3);
  const int32_t heads = 1 + (data[0] >> 4);
  // D is kept to 4096 here: huge D is issue 15 item 1 (next_pow2), fixed and tested separately.
  const int32_t dim = 1 + ((data[1] | (data[2] << 8)) % 4096);
  const dfgnn::PassKind pass = static_cast<dfgnn::PassKind>(data[3] % 3);
  const int32_t max_vec = 1 << ((data[3] >> 2) % 4);
  const dfgnn_fingerprint_t fp = shape(data[3] >> 6);
  const std::string text(reinterpret_cast<const char*>(data + 4), size - 4);

  dfgnn::PassProblem problem;
  problem.op = dfgnnOpDefault(model, dtype, heads, dim);
  problem.pass = pass;
  problem.fingerprint = &fp;
  problem.max_vec = max_vec;

  // The solvers' own schedules are valid (or the problem has none: NOT_SUPPORTED).
  try {
    dfgnn::require_valid(problem, dfgnn::default_schedule(problem));
    for (const dfgnn::Schedule& s : dfgnn::enumerate_schedules(problem)) {
      dfgnn::require_valid(problem, s);
      FUZZ_CHECK(dfgnn::parse_schedule(dfgnn::to_string(s)) == s, dfgnn::to_string(s));
    }
  } catch (const dfgnn::Error& e) {
    FUZZ_CHECK(e.status() == DFGNN_STATUS_NOT_SUPPORTED, e.what());
  }

  dfgnn::Schedule s;
  try {
    s = dfgnn::parse_schedule(text);
  } catch (const dfgnn::Error& e) {
    FUZZ_CHECK(e.status() == DFGNN_STATUS_PARSE_ERROR && e.what()[0] != '\0', e.what());
    return 0;
  }
  const std::string printed = dfgnn::to_string(s);
  dfgnn::Schedule again;
  try {
    again = dfgnn::parse_schedule(printed);
  } catch (const dfgnn::Error& e) {
    FUZZ_CHECK(false, "printed schedule does not parse: " + printed + ": " + e.what());
  }
  FUZZ_CHECK(again == s, printed);
  FUZZ_CHECK(dfgnn::to_string(again) == printed, printed);

  std::string first, second;
  for (std::string* reason : {&first, &second}) {
    try {
      dfgnn::require_valid(problem, s);
    } catch (const dfgnn::Error& e) {
      FUZZ_CHECK(e.status() == DFGNN_STATUS_INVALID_ARGUMENT, e.what());
      *reason = e.what();
      FUZZ_CHECK(!reason->empty(), "empty reason");
    }
  }
  FUZZ_CHECK(first == second, "validity check is not deterministic");
  if (first.empty()) check_plan(problem, s);
  return 0;
}
