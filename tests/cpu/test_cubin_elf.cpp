// The cubin reader (runtime/src/cubin_elf.hpp) on NVRTC's own images, its occupancy arithmetic, and
// what the ModuleCache does with them: dropout kernels held at their sibling's resident blocks.
#include "test_util.hpp"

#include "cubin_elf.hpp"
#include "kernel_names.hpp"
#include "nvrtc.hpp"
#include "ops.hpp"
#include "schedule.hpp"

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// GAT's class-count output layer (1 x 7) on the hub-split schedule R-MAT 2^20 runs it with, where
// dropout took the forward and the row pass from 32 to 39-40 registers (75% of the warps).
dfgnn_op_t class_layer(float dropout) {
  dfgnn_op_t op = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 1, 7);
  op.dropout = dropout;
  return op;
}
const char* kHubSplit = "hub_split:lanes=8,groups=32,vec=1,threshold=128,chunk=128";

std::vector<std::string> names_of(const dfgnn_op_t& op, dfgnn::PassKind pass) {
  return dfgnn::pass_kernel_names(op, pass, dfgnn::parse_schedule(kHubSplit));
}

}  // namespace

TEST(CubinElf, ReadsEachKernelsCodeAndResources) {
  const std::vector<std::string> names = names_of(class_layer(0), dfgnn::PassKind::Forward);
  ASSERT_EQ(names.size(), 2u);  // the rows kernel and the merge of split hub rows
  const dfgnn::Cubin cubin = dfgnn::compile(names, 90);
  const dfgnn::CubinElf elf(cubin.image);
  const auto code = elf.machine_code();
  const auto resources = elf.resources();
  for (const std::string& kernel : cubin.lowered) {
    SCOPED_TRACE(kernel);
    ASSERT_EQ(code.count(kernel), 1u);
    EXPECT_GT(code.at(kernel).size(), 0u);
    EXPECT_EQ(code.at(kernel).size() % 16, 0u) << "sm_90 instructions are 16 bytes";
    ASSERT_EQ(resources.count(kernel), 1u);
    const dfgnn::KernelResources& r = resources.at(kernel);
    EXPECT_GE(r.registers, 8);
    EXPECT_LE(r.registers, 255);
    EXPECT_GE(r.frame_bytes, 0);
    // Both kernels' __launch_bounds__: 32 groups of 8 lanes.
    EXPECT_EQ(r.max_threads, 256);
  }
  EXPECT_NE(code.at(cubin.lowered[0]), code.at(cubin.lowered[1]));
}

TEST(CubinElf, RefusesMalformedImagesWithoutReadingPastThem) {
  const dfgnn::Cubin cubin = dfgnn::compile(names_of(class_layer(0), dfgnn::PassKind::Forward), 90);
  EXPECT_THROW(dfgnn::CubinElf(std::vector<char>{}), std::runtime_error);
  EXPECT_THROW(dfgnn::CubinElf(std::vector<char>(64, '\0')), std::runtime_error);
  // Every truncation either fails to parse or parses to something no larger than the image.
  const size_t step = cubin.image.size() / 97 + 1;
  int refused = 0;
  for (size_t size = 0; size < cubin.image.size(); size += step) {
    const std::vector<char> cut(cubin.image.begin(), cubin.image.begin() + static_cast<std::ptrdiff_t>(size));
    try {
      const dfgnn::CubinElf elf(cut);
      for (const auto& [kernel, bytes] : elf.machine_code()) EXPECT_LE(bytes.size(), size) << kernel;
      elf.resources();
    } catch (const std::runtime_error&) {
      ++refused;
    }
  }
  EXPECT_GT(refused, 90) << "the section table is at the end of the image: most cuts lose it";
  // A section that claims to run past the image.
  std::vector<char> bad = cubin.image;
  uint64_t table = 0;
  std::memcpy(&table, bad.data() + 0x28, 8);
  const uint64_t huge = uint64_t{1} << 62;
  std::memcpy(bad.data() + table + 64 + 0x20, &huge, 8);  // section 1's size
  EXPECT_THROW(dfgnn::CubinElf{bad}, std::runtime_error);
}

TEST(CubinElf, ResidentBlocksFollowTheRegisterFile) {
  // sm_90: 64 warps, 32 blocks, 64K registers allocated per warp in units of 256.
  EXPECT_EQ(dfgnn::resident_blocks(32, 256, 90), 8);   // the thread limit, not registers
  EXPECT_EQ(dfgnn::resident_blocks(40, 256, 90), 6);   // 1280 registers a warp: 51 warps
  EXPECT_EQ(dfgnn::resident_blocks(39, 256, 90), 6);   // rounded up to the same 1280
  EXPECT_EQ(dfgnn::resident_blocks(64, 256, 90), 4);
  EXPECT_EQ(dfgnn::resident_blocks(64, 512, 90), 2);
  EXPECT_EQ(dfgnn::resident_blocks(24, 32, 90), 32);   // the block limit
  EXPECT_EQ(dfgnn::resident_blocks(255, 1024, 90), 0);  // cannot launch at all
  EXPECT_EQ(dfgnn::resident_blocks(32, 256, 86), 6);   // 48 warps on sm_86
  EXPECT_EQ(dfgnn::resident_blocks(32, 256, 75), 4);   // 32 warps on sm_75
  EXPECT_EQ(dfgnn::resident_blocks(32, 256, 61), 0);   // no table: no answer
  EXPECT_EQ(dfgnn::resident_blocks(0, 256, 90), 0);
  EXPECT_EQ(dfgnn::resident_blocks(32, 0, 90), 0);
}

// Names: the sibling of a dropout kernel is the name the op without dropout gets, for one head
// and for groups spanning heads, with and without edge features, in every dtype.
TEST(CubinElf, DropoutKernelsNameTheirSiblingAndTheirHeldForm) {
  struct Case {
    dfgnn_model_t model;
    dfgnn_dtype_t dtype;
    int heads, dim;
    bool edges;
    const char* schedule;
  };
  const Case cases[] = {
      {DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 1, 7, false, kHubSplit},
      {DFGNN_MODEL_GAT, DFGNN_DTYPE_BFLOAT16, 8, 8, false, "edge_balanced:lanes=16,heads=8,groups=16,vec=4,chunk=256"},
      {DFGNN_MODEL_TRANSFORMER, DFGNN_DTYPE_FLOAT16, 4, 64, true, "subwarp:lanes=16,groups=16,vec=8"},
      {DFGNN_MODEL_GATV2, DFGNN_DTYPE_FLOAT32, 2, 32, false, "hub_split:lanes=16,heads=2,groups=16,vec=4,threshold=128,chunk=128"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.schedule);
    dfgnn_op_t plain = dfgnnOpDefault(c.model, c.dtype, c.heads, c.dim);
    plain.edge_features = c.edges ? 1 : 0;
    dfgnn_op_t dropped = plain;
    dropped.dropout = 0.6f;
    const dfgnn::Schedule s = dfgnn::parse_schedule(c.schedule);
    for (dfgnn::PassKind pass : {dfgnn::PassKind::Forward, dfgnn::PassKind::BackwardRow, dfgnn::PassKind::BackwardCol}) {
      const std::vector<std::string> with = dfgnn::pass_kernel_names(dropped, pass, s);
      const std::vector<std::string> without = dfgnn::pass_kernel_names(plain, pass, s);
      ASSERT_EQ(with.size(), without.size());
      for (size_t k = 0; k < with.size(); ++k) {
        SCOPED_TRACE(with[k]);
        EXPECT_EQ(dfgnn::without_dropout(without[k]), std::nullopt);
        EXPECT_EQ(dfgnn::without_dropout(with[k]), without[k]);
        const std::optional<std::string> h = dfgnn::held_resident(with[k], 6);
        if (with[k].rfind("&dfgnn::merge_kernel<", 0) == 0) {  // its launch bounds ask for no blocks
          EXPECT_EQ(h, std::nullopt);
          continue;
        }
        const size_t geo = with[k].find("dfgnn::Geo<"), end = with[k].find('>', geo) + 1;
        EXPECT_EQ(h, with[k].substr(0, geo) + "dfgnn::Resident<" + with[k].substr(geo, end - geo) + ",6>" +
                         with[k].substr(end));
        EXPECT_EQ(dfgnn::held_resident(without[k], 6), std::nullopt);
        EXPECT_EQ(dfgnn::held_resident(with[k], 0), std::nullopt);
      }
    }
  }
  EXPECT_EQ(dfgnn::without_dropout("&dfgnn::reduce_nodes_stage2<true>"), std::nullopt);
}

// The module cache compiles a dropout module with its kernels held at the resident blocks of the
// module without dropout (compiled, cached and counted on the way); the kernels keep their names.
TEST(CubinElf, DropoutModulesKeepTheirSiblingsOccupancy) {
  for (dfgnn::PassKind pass : {dfgnn::PassKind::Forward, dfgnn::PassKind::BackwardRow}) {
    dfgnn::ModuleCache cache;
    const std::vector<std::string> names = names_of(class_layer(0.6f), pass), plain = names_of(class_layer(0), pass);
    const auto module = cache.cubin(names, 90);
    EXPECT_EQ(module->names, names);
    EXPECT_EQ(cache.counters().compiles, 2u) << "the module and its sibling without dropout";
    const auto sibling = cache.cubin(plain, 90);
    EXPECT_EQ(cache.counters().compiles, 2u) << "the sibling is cached";
    const auto held = dfgnn::CubinElf(module->image).resources();
    const auto timed = dfgnn::CubinElf(sibling->image).resources();
    // The rows kernel is held (its lowered name is the Resident form's), the merge is not.
    EXPECT_NE(module->lowered[0].find("Resident"), std::string::npos) << module->lowered[0];
    EXPECT_EQ(module->lowered[1].find("Resident"), std::string::npos) << module->lowered[1];
    const auto& mine = held.at(module->lowered[0]);
    const auto& theirs = timed.at(sibling->lowered[0]);
    EXPECT_GE(dfgnn::resident_blocks(mine.registers, mine.max_threads, 90),
              dfgnn::resident_blocks(theirs.registers, theirs.max_threads, 90))
        << mine.registers << " registers against " << theirs.registers;
  }
  // Every held kernel spills no more than its sibling, and a kernel that would is compiled at its own
  // occupancy: PyG's 8 x 8 hidden layer, whose row pass held at its sibling's 6 blocks (40 registers)
  // would spill.
  dfgnn_op_t hidden = dfgnnOpDefault(DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 8, 8);
  const dfgnn::Schedule wide = dfgnn::parse_schedule("hub_split:lanes=16,heads=8,groups=16,vec=4,threshold=128,chunk=128");
  for (dfgnn::PassKind pass : {dfgnn::PassKind::Forward, dfgnn::PassKind::BackwardRow, dfgnn::PassKind::BackwardCol}) {
    dfgnn::ModuleCache cache;
    dfgnn_op_t dropped = hidden;
    dropped.dropout = 0.6f;
    const auto module = cache.cubin(dfgnn::pass_kernel_names(dropped, pass, wide), 90);
    const auto sibling = cache.cubin(dfgnn::pass_kernel_names(hidden, pass, wide), 90);
    const auto mine = dfgnn::CubinElf(module->image).resources(), theirs = dfgnn::CubinElf(sibling->image).resources();
    const auto& a = mine.at(module->lowered[0]);
    const auto& b = theirs.at(sibling->lowered[0]);
    SCOPED_TRACE(module->lowered[0]);
    EXPECT_LE(a.frame_bytes, b.frame_bytes);
    if (module->lowered[0].find("Resident") != std::string::npos)
      EXPECT_GE(dfgnn::resident_blocks(a.registers, a.max_threads, 90), dfgnn::resident_blocks(b.registers, b.max_threads, 90));
  }
  // A module without dropout compiles alone and as named.
  dfgnn::ModuleCache cache;
  const auto plain = cache.cubin(names_of(class_layer(0), dfgnn::PassKind::Forward), 90);
  EXPECT_EQ(cache.counters().compiles, 1u);
  EXPECT_EQ(plain->lowered, dfgnn::compile(plain->names, 90).lowered);
}
