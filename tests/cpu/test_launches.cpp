// Launches (Solver::kernels and Solver::launches): for several schedules of every solver and every
// pass, the full list of kernel launches a pass makes over a hand-worked plan, in launch order:
// role, NVRTC name expression, plan part, grid, block and dynamic shared memory. The expected
// values are worked out by hand from the schedule fields and the graph below (comments show the
// arithmetic), so a change to any launch shape, kernel specialisation or launch order fails here
// before it reaches a GPU.
//
// The graph: 6 rows of degrees {1, 3, 10, 0, 2, 7} (23 edges, row pointers 0 1 4 14 14 16 23).
// The op: Transformer, float32, H = 8 heads, D = 32, so a pass state holds (NS + NV * D floats):
// forward 2 + 32 = 34, backward row 0 + 32 = 32, backward column 0 + 2 * 32 = 64.
#include "test_util.hpp"

#include "graph.hpp"
#include "ops.hpp"
#include "plan.hpp"
#include "schedule.hpp"
#include "solver.hpp"

#include <algorithm>
#include <string>
#include <vector>

using dfgnn::Launch;
using dfgnn::PassKind;

namespace {

constexpr int32_t kHeads = 8;
constexpr PassKind kPasses[] = {PassKind::Forward, PassKind::BackwardRow, PassKind::BackwardCol};

std::unique_ptr<dfgnn::Graph> hand_graph() {
  const std::vector<int32_t> degrees{1, 3, 10, 0, 2, 7};
  const auto n = static_cast<int32_t>(degrees.size());
  std::vector<int32_t> ptr{0}, col;
  for (int32_t i = 0; i < n; ++i) {
    for (int32_t k = 0; k < degrees[i]; ++k) col.push_back((i + 1 + k) % n);
    ptr.push_back(static_cast<int32_t>(col.size()));
  }
  return dfgnn::Graph::from_csr(n, static_cast<int64_t>(col.size()), ptr.data(), col.data(), DFGNN_INDEX_INT32,
                                dfgnnGraphDefaultOptions());
}

dfgnn_op_t hand_op() { return dfgnnOpDefault(DFGNN_MODEL_TRANSFORMER, DFGNN_DTYPE_FLOAT32, kHeads, 32); }

// Bytes of one pass state (see the header comment).
size_t state_bytes(PassKind pass) {
  switch (pass) {
    case PassKind::Forward: return 34 * 4;
    case PassKind::BackwardRow: return 32 * 4;
    case PassKind::BackwardCol: return 64 * 4;
  }
  return 0;
}

// The pass template a kernel is specialised on, spelled out: Geo's L is the lanes of one head, and
// a group spanning `heads` heads names them last.
std::string pass_t(PassKind pass, int lanes, int vec, int heads = 1) {
  const char* name = pass == PassKind::Forward ? "Forward" : pass == PassKind::BackwardRow ? "BackwardRow" : "BackwardCol";
  return std::string("dfgnn::") + name + "<dfgnn::Geo<float,32,8," + std::to_string(lanes / heads) + "," +
         std::to_string(vec) + ",false" + (heads == 1 ? "" : "," + std::to_string(heads)) + ">,dfgnn::Transformer>";
}
std::string rows_k(PassKind pass, int lanes, int vec, int groups, int team, int heads = 1) {
  return "&dfgnn::rows_kernel<" + pass_t(pass, lanes, vec, heads) + "," + std::to_string(groups) + "," +
         std::to_string(team) + ">";
}
std::string merge_k(PassKind pass, int lanes, int vec, int heads = 1) {
  return "&dfgnn::merge_kernel<" + pass_t(pass, lanes, vec, heads) + "," + std::to_string(256 / lanes) + ">";
}
std::string balanced_k(PassKind pass, int lanes, int vec, int groups, int heads = 1) {
  return "&dfgnn::balanced_kernel<" + pass_t(pass, lanes, vec, heads) + "," + std::to_string(groups) + ">";
}

Launch launch(const char* role, std::string kernel, int32_t part, int64_t grid, int32_t block, size_t smem) {
  Launch l;
  l.role = role;
  l.kernel = std::move(kernel);
  l.part = part;
  l.grid = grid;
  l.block = block;
  l.smem = smem;
  return l;
}

std::string describe(const std::vector<Launch>& launches) {
  std::string out;
  for (const Launch& l : launches)
    out += std::string(l.role) + " " + l.kernel + " part=" + std::to_string(l.part) + " grid=" + std::to_string(l.grid) +
           " block=" + std::to_string(l.block) + " smem=" + std::to_string(l.smem) + "\n";
  return out;
}

struct Expected {
  std::vector<std::string> kernels;  // the module's names, in order
  std::vector<Launch> launches;      // in launch order
};

// Checks one schedule on every pass against `expect(pass)`, over the CSR plan of the hand graph.
template <typename F>
void check(const std::string& text, F expect) {
  SCOPED_TRACE(text);
  const auto g = hand_graph();
  const dfgnn_op_t op = hand_op();
  const dfgnn::Schedule s = dfgnn::parse_schedule(text);
  const dfgnn::Solver& solver = dfgnn::solver_of(s);
  const dfgnn::HostPlan plan = dfgnn::make_plan(g->csr(), s);
  for (PassKind pass : kPasses) {
    SCOPED_TRACE(dfgnn::pass_name(pass));
    EXPECT_NO_THROW(dfgnn::require_valid(dfgnn::pass_problem(*g, op, pass, 4), s));
    const Expected e = expect(pass);
    EXPECT_EQ(solver.kernels(op, pass, s), e.kernels);
    EXPECT_EQ(dfgnn::pass_kernel_names(op, pass, s), e.kernels);
    const std::vector<Launch> got = solver.launches(op, pass, s, plan, g->num_nodes());
    EXPECT_EQ(describe(got), describe(e.launches));
    for (const Launch& l : got)
      EXPECT_NE(std::find(e.kernels.begin(), e.kernels.end(), l.kernel), e.kernels.end()) << l.kernel;
  }
}

}  // namespace

TEST(Launches, Subwarp) {
  // Whole rows: 6 rows x 8 heads = 48 (row, head) items, `groups` per block.
  check("subwarp:lanes=8,groups=32,vec=4", [](PassKind p) {
    return Expected{{rows_k(p, 8, 4, 32, 1)}, {launch("rows", rows_k(p, 8, 4, 32, 1), 0, 2, 256, 0)}};  // ceil(48/32)
  });
  check("subwarp:lanes=4,groups=32,vec=1", [](PassKind p) {
    return Expected{{rows_k(p, 4, 1, 32, 1)}, {launch("rows", rows_k(p, 4, 1, 32, 1), 0, 2, 128, 0)}};
  });
  check("subwarp:lanes=16,groups=8,vec=2", [](PassKind p) {
    return Expected{{rows_k(p, 16, 2, 8, 1)}, {launch("rows", rows_k(p, 16, 2, 8, 1), 0, 6, 128, 0)}};  // 48/8
  });
}

TEST(Launches, BlockRow) {
  // A team of `team` groups per (row, head): groups / team items per block; teams merge in shared
  // memory, one state per group.
  check("block_row:lanes=32,groups=4,team=4,vec=4", [](PassKind p) {
    return Expected{{rows_k(p, 32, 4, 4, 4)}, {launch("rows", rows_k(p, 32, 4, 4, 4), 0, 48, 128, 4 * state_bytes(p))}};
  });
  check("block_row:lanes=16,groups=8,team=4,vec=2", [](PassKind p) {
    return Expected{{rows_k(p, 16, 2, 8, 4)},
                    {launch("rows", rows_k(p, 16, 2, 8, 4), 0, 24, 128, 8 * state_bytes(p))}};  // 48 / (8/4)
  });
}

TEST(Launches, HubSplit) {
  // threshold 7, chunk 4: rows 2 (10 edges) and 5 (7 edges) split into 3 + 2 = 5 chunks, 2 hubs.
  // Chunks first (5 x 8 = 40 items), then every row below the threshold (48 items), then the
  // merge: 2 hubs x 8 heads, 256 / lanes per block.
  check("hub_split:lanes=32,groups=4,vec=1,threshold=7,chunk=4", [](PassKind p) {
    const std::string rows = rows_k(p, 32, 1, 4, 1);
    return Expected{{rows, merge_k(p, 32, 1)},
                    {launch("chunks", rows, 0, 10, 128, 0), launch("rows", rows, 1, 12, 128, 0),
                     launch("merge", merge_k(p, 32, 1), Launch::kHubList, 2, 256, 0)}};  // 16 / 8
  });
  check("hub_split:lanes=8,groups=32,vec=4,threshold=7,chunk=4", [](PassKind p) {
    const std::string rows = rows_k(p, 8, 4, 32, 1);
    return Expected{{rows, merge_k(p, 8, 4)},
                    {launch("chunks", rows, 0, 2, 256, 0), launch("rows", rows, 1, 2, 256, 0),
                     launch("merge", merge_k(p, 8, 4), Launch::kHubList, 1, 256, 0)}};  // 16 / 32
  });
  // No row reaches the threshold: one whole-row launch, no merge.
  check("hub_split:lanes=8,groups=16,vec=4,threshold=16,chunk=4", [](PassKind p) {
    return Expected{{rows_k(p, 8, 4, 16, 1), merge_k(p, 8, 4)}, {launch("rows", rows_k(p, 8, 4, 16, 1), 0, 3, 128, 0)}};
  });
}

TEST(Launches, Hybrid) {
  // mid 2, threshold 7, chunk 4: the 5 chunks of rows 2 and 5 on whole warps (8 warps a block),
  // rows of degree [2, 7) whole on whole warps, rows below 2 on `lanes` lanes; the merge on warps.
  check("hybrid:lanes=8,groups=32,vec=2,mid=2,threshold=7,chunk=4", [](PassKind p) {
    const std::string warp = rows_k(p, 32, 2, 8, 1), small = rows_k(p, 8, 2, 32, 1);
    return Expected{{small, warp, merge_k(p, 32, 2)},
                    {launch("chunks", warp, 0, 5, 256, 0),       // 40 / 8
                     launch("warp rows", warp, 1, 6, 256, 0),    // 48 / 8
                     launch("rows", small, 2, 2, 256, 0),        // 48 / 32
                     launch("merge", merge_k(p, 32, 2), Launch::kHubList, 2, 256, 0)}};  // 16 / 8
  });
  // No row reaches the threshold: the two whole-row bins only.
  check("hybrid:lanes=4,groups=32,vec=1,mid=3,threshold=16,chunk=512", [](PassKind p) {
    const std::string warp = rows_k(p, 32, 1, 8, 1), small = rows_k(p, 4, 1, 32, 1);
    return Expected{{small, warp, merge_k(p, 32, 1)},
                    {launch("warp rows", warp, 0, 6, 256, 0), launch("rows", small, 1, 2, 128, 0)}};
  });
}

TEST(Launches, EdgeBalanced) {
  // chunk 16, groups 8: rows grouped while their cost (degree + 1) fits 16: {0, 1} (2 + 4),
  // {2, 3, 4} (11 + 1 + 3), {5} (8); no row exceeds 16 edges, so no split. One block per (row
  // group, heads of the block): 8 groups serve all 8 heads at once, so 3 blocks; a state per group
  // in shared memory.
  check("edge_balanced:lanes=8,groups=8,vec=4,chunk=16", [](PassKind p) {
    return Expected{{rows_k(p, 8, 4, 32, 1), merge_k(p, 8, 4), balanced_k(p, 8, 4, 8)},
                    {launch("balanced", balanced_k(p, 8, 4, 8), 0, 3, 64, 8 * state_bytes(p))}};
  });
  // chunk 8, groups 4: row 2 (10 edges > 8) is split into pieces of 8 / 4 = 2 edges (5 pieces,
  // one hub) on the 256-thread split kernel (16 groups of 16 lanes: ceil(40 / 16) = 3 blocks);
  // groups {0, 1}, {3, 4}, {5}; 4 groups do not divide 8 heads, so a block per (group, head):
  // 3 x 8 = 24 blocks; the merge: 8 items, 16 per block.
  check("edge_balanced:lanes=16,groups=4,vec=2,chunk=8", [](PassKind p) {
    const std::string split = rows_k(p, 16, 2, 16, 1);
    return Expected{{split, merge_k(p, 16, 2), balanced_k(p, 16, 2, 4)},
                    {launch("chunks", split, 0, 3, 256, 0),
                     launch("balanced", balanced_k(p, 16, 2, 4), 1, 24, 64, 4 * state_bytes(p)),
                     launch("merge", merge_k(p, 16, 2), Launch::kHubList, 1, 256, 0)}};
  });
}

TEST(Launches, GroupsSpanningHeads) {
  // A group spanning `heads` heads serves one (item, head block): 8 / heads head blocks per item.
  // Subwarp, 2 heads a group: 6 rows x 4 head blocks = 24 groups' work, 8 per block.
  check("subwarp:lanes=32,heads=2,groups=8,vec=4", [](PassKind p) {
    return Expected{{rows_k(p, 32, 4, 8, 1, 2)}, {launch("rows", rows_k(p, 32, 4, 8, 1, 2), 0, 3, 256, 0)}};
  });
  // Block row, 4 heads a group, teams of 2: 12 (row, head block) items, 2 per block; one state per
  // (group, head) in shared memory: 4 groups x 4 heads.
  check("block_row:lanes=32,heads=4,groups=4,team=2,vec=4", [](PassKind p) {
    return Expected{{rows_k(p, 32, 4, 4, 2, 4)},
                    {launch("rows", rows_k(p, 32, 4, 4, 2, 4), 0, 6, 128, 16 * state_bytes(p))}};
  });
  // Hub split (threshold 7, chunk 4: 5 chunks of 2 hubs), 4 heads a group, 2 head blocks: chunks
  // 10 items, rows 12, merge 4, each on one block of 16 groups.
  check("hub_split:lanes=16,heads=4,groups=16,vec=4,threshold=7,chunk=4", [](PassKind p) {
    const std::string rows = rows_k(p, 16, 4, 16, 1, 4);
    return Expected{{rows, merge_k(p, 16, 4, 4)},
                    {launch("chunks", rows, 0, 1, 256, 0), launch("rows", rows, 1, 1, 256, 0),
                     launch("merge", merge_k(p, 16, 4, 4), Launch::kHubList, 1, 256, 0)}};
  });
  // Hybrid: its small bin spans 2 heads (24 (row, head block) items, 16 per block); the warp bins and
  // the merge keep one head a warp, as without spanning.
  check("hybrid:lanes=16,heads=2,groups=16,vec=4,mid=2,threshold=7,chunk=4", [](PassKind p) {
    const std::string warp = rows_k(p, 32, 4, 8, 1), small = rows_k(p, 16, 4, 16, 1, 2);
    return Expected{{small, warp, merge_k(p, 32, 4)},
                    {launch("chunks", warp, 0, 5, 256, 0), launch("warp rows", warp, 1, 6, 256, 0),
                     launch("rows", small, 2, 2, 256, 0), launch("merge", merge_k(p, 32, 4), Launch::kHubList, 2, 256, 0)}};
  });
  // Edge balanced, 4 heads a group (2 head blocks): row groups {0, 1}, {2, 3, 4}, {5}; 4 groups
  // hold both head blocks, so 3 blocks; shared memory for 4 groups x 4 heads.
  check("edge_balanced:lanes=16,heads=4,groups=4,vec=4,chunk=16", [](PassKind p) {
    return Expected{{rows_k(p, 16, 4, 16, 1, 4), merge_k(p, 16, 4, 4), balanced_k(p, 16, 4, 4, 4)},
                    {launch("balanced", balanced_k(p, 16, 4, 4, 4), 0, 3, 64, 16 * state_bytes(p))}};
  });
  // Edge balanced, all 8 heads a group (4 lanes a head, 2 chunks of channels), chunk 8: row 2 is
  // split into pieces of 8 / 2 = 4 edges (3 pieces, one block of the 8-group split kernel), groups
  // {0, 1}, {3, 4}, {5}: 3 blocks of 2 groups x 8 heads of states; the merge: 1 item.
  check("edge_balanced:lanes=32,heads=8,groups=2,vec=4,chunk=8", [](PassKind p) {
    const std::string split = rows_k(p, 32, 4, 8, 1, 8);
    return Expected{{split, merge_k(p, 32, 4, 8), balanced_k(p, 32, 4, 2, 8)},
                    {launch("chunks", split, 0, 1, 256, 0),
                     launch("balanced", balanced_k(p, 32, 4, 2, 8), 1, 3, 64, 16 * state_bytes(p)),
                     launch("merge", merge_k(p, 32, 4, 8), Launch::kHubList, 1, 256, 0)}};
  });
}

TEST(Launches, BackwardHelpers) {
  // The prep kernel (lanes sized to D = 32 at vec 1: 32 lanes, 8 groups) and, for models with a
  // parameter, the two reduction stages.
  dfgnn_op_t op = hand_op();
  EXPECT_EQ(dfgnn::backward_helper_names(op),
            (std::vector<std::string>{"&dfgnn::prep_kernel<dfgnn::Geo<float,32,8,32,1,false>,dfgnn::Transformer,8>"}));
  op = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT16, 2, 16);
  EXPECT_EQ(dfgnn::backward_helper_names(op),
            (std::vector<std::string>{"&dfgnn::prep_kernel<dfgnn::Geo<dfgnn::f16,16,2,16,1,false>,dfgnn::Gat,16>",
                                      "&dfgnn::reduce_nodes_stage1<dfgnn::f16,16,true>",
                                      "&dfgnn::reduce_nodes_stage2<false>"}));
  op = dfgnnOpDefault(DFGNN_MODEL_AGNN, DFGNN_DTYPE_FLOAT32, 1, 8);
  EXPECT_EQ(dfgnn::backward_helper_names(op),
            (std::vector<std::string>{"&dfgnn::prep_kernel<dfgnn::Geo<float,8,1,8,1,false>,dfgnn::Agnn,32>",
                                      "&dfgnn::reduce_nodes_stage1<float,1,false>", "&dfgnn::reduce_nodes_stage2<true>"}));
  op = dfgnnOpDefault(DFGNN_MODEL_GATV2, DFGNN_DTYPE_BFLOAT16, 4, 64);
  EXPECT_EQ(dfgnn::backward_helper_names(op),
            (std::vector<std::string>{"&dfgnn::prep_kernel<dfgnn::Geo<dfgnn::bf16,64,4,32,1,false>,dfgnn::Gatv2,8>",
                                      "&dfgnn::reduce_nodes_stage1<float,64,false>",
                                      "&dfgnn::reduce_nodes_stage2<false>"}));
}
