// The shipped modules (data/tuning/sm90-modules.db, made by bench/ship-modules.sh): the committed
// file matches the kernel sources (CI's check that it was rebuilt after a kernel change); a fresh
// context with an empty user cache compiles nothing for the default dispatch of every zoo config
// on Cora; a module of another kernel source or with a damaged image is compiled again, never used.
#include "test_util.hpp"

#include "context.hpp"
#include "nvrtc.hpp"

#include <sqlite3.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace dfgnn::test;
namespace fs = std::filesystem;

namespace {

const fs::path kShipped = source_dir() / "data" / "tuning" / "sm90-modules.db";
constexpr const char* kRebuild =
    "rebuild it: bash bench/ship-modules.sh build data/tuning/sm90-modules.db ../shared/datasets (no GPU needed)";

// DFGNN_SHIPPED_DB set while alive (read when a context opens its databases).
class ShippedDb {
 public:
  explicit ShippedDb(const std::string& value) {
    if (const char* v = std::getenv("DFGNN_SHIPPED_DB")) old_ = v;
    setenv("DFGNN_SHIPPED_DB", value.c_str(), 1);
  }
  ~ShippedDb() {
    if (old_) setenv("DFGNN_SHIPPED_DB", old_->c_str(), 1);
    else unsetenv("DFGNN_SHIPPED_DB");
  }

 private:
  std::optional<std::string> old_;
};

struct ScratchDir {
  fs::path path;
  ScratchDir() {
    std::random_device rd;
    path = fs::temp_directory_path() / ("dfgnn-modules-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
    fs::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// Runs SQL on a database file; returns the first column of each row as text.
std::vector<std::string> query(const fs::path& db, const std::string& sql) {
  sqlite3* h = nullptr;
  std::vector<std::string> rows;
  EXPECT_EQ(sqlite3_open(db.c_str(), &h), SQLITE_OK) << db;
  sqlite3_stmt* s = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(h, sql.c_str(), -1, &s, nullptr), SQLITE_OK) << sqlite3_errmsg(h) << ": " << sql;
  while (s != nullptr && sqlite3_step(s) == SQLITE_ROW) {
    const unsigned char* text = sqlite3_column_text(s, 0);
    rows.emplace_back(text == nullptr ? "" : reinterpret_cast<const char*>(text));
  }
  sqlite3_finalize(s);
  sqlite3_close(h);
  return rows;
}

uint64_t compiles(dfgnn_context_t ctx) {
  uint64_t c = 0, hits = 0, loads = 0;
  EXPECT_EQ(dfgnnGetCacheCounters(ctx, &c, &hits, &loads), DFGNN_STATUS_SUCCESS);
  return c;
}

// A context over `user` (a fresh file) and no site, compiling an op's default schedules both ways.
uint64_t compiles_for(const fs::path& user, dfgnn_model_t model, dfgnn_dtype_t dtype, int heads, int dim, bool loops) {
  ContextPtr ctx = make_context();
  EXPECT_EQ(dfgnnSetDatabase(ctx.get(), user.c_str(), ""), DFGNN_STATUS_SUCCESS) << dfgnnGetLastErrorMessage();
  GraphPtr g;
  if (loops) {
    g = cora_with_loops(ctx.get());
  } else {
    dfgnn_graph_t raw = nullptr;
    EXPECT_EQ(dfgnnGraphCreateFromFile(ctx.get(), (source_dir() / "data/cora").c_str(), nullptr, &raw),
              DFGNN_STATUS_SUCCESS);
    g.reset(raw);
  }
  const dfgnn_op_t op = dfgnnOpDefault(model, dtype, heads, dim);
  for (dfgnn_direction_t d : {DFGNN_FORWARD, DFGNN_BACKWARD})
    EXPECT_EQ(dfgnnCompile(ctx.get(), g.get(), &op, d, nullptr, 90), DFGNN_STATUS_SUCCESS) << dfgnnGetLastErrorMessage();
  return compiles(ctx.get());
}

}  // namespace

TEST(ShippedModules, CommittedFileMatchesTheKernelSources) {
  ASSERT_TRUE(fs::exists(kShipped)) << kShipped << " is missing; " << kRebuild;
  const std::vector<std::string> hashes = query(kShipped, "SELECT DISTINCT template_hash FROM modules");
  ASSERT_FALSE(hashes.empty()) << kShipped << " holds no module; " << kRebuild;
  EXPECT_EQ(hashes, std::vector<std::string>{dfgnn::kernel_source_hash()})
      << kShipped << " was compiled from other kernel sources; " << kRebuild;
  EXPECT_EQ(query(kShipped, "SELECT DISTINCT arch FROM modules"), std::vector<std::string>{"90"});
  EXPECT_EQ(query(kShipped, "SELECT count(*) FROM results"), std::vector<std::string>{"0"})
      << "the modules file holds modules only (the winners are in the other sm90*.db files)";
}

// The shipped winners answer only the kernel sources and library version they were tuned with
// (dispatch skips a stale file): a kernel change fails here until the sweep is made again.
TEST(ShippedModules, CommittedWinnersMatchTheKernelSourcesAndLibrary) {
  const std::vector<fs::path> files = shipped_winners_files();
  ASSERT_FALSE(files.empty()) << "no data/tuning/sm90*.db winners file";
  const std::string resweep = " was tuned with other kernel sources or another library version; tune it again on an "
                              "H100/H200 (bench/tune-site.sh, docs/tuning-db.rst) and rebuild the modules file";
  for (const fs::path& winners : files) {
    EXPECT_EQ(query(winners, "SELECT DISTINCT template_hash FROM results"),
              std::vector<std::string>{dfgnn::kernel_source_hash()}) << winners << resweep;
    EXPECT_EQ(query(winners, "SELECT DISTINCT library_version FROM results"), std::vector<std::string>{dfgnnGetVersion()})
        << winners << resweep;
    EXPECT_EQ(query(winners, "SELECT count(*) FROM modules"), std::vector<std::string>{"0"})
        << winners << ": a winners file holds no modules (they are in sm90-modules.db)";
    // One GPU class per file: a layer with no results of this GPU's class answers as one other class
    // (db/src/layered_db.cpp), so a second class in one file would hide the first on that GPU.
    EXPECT_EQ(query(winners, "SELECT count(DISTINCT env_class) FROM results"), std::vector<std::string>{"1"}) << winners;
    // The modules file is of the same kernel sources (Cli.ShippedModulesHoldEveryShippedWinner checks
    // it holds every winner's kernels).
    EXPECT_EQ(query(kShipped, "SELECT DISTINCT template_hash FROM modules"),
              query(winners, "SELECT DISTINCT template_hash FROM results")) << winners;
  }
  // No (op, graph) in two files: the shipped layers are read in name order, and the first file's row
  // (another GPU's, as a stand-in) would shadow the second's own for an exact answer, or for that
  // graph's vote in a nearest one. An op may be in both, on different graphs (the H100's GAT rows
  // are of the graphs with self-loops, the H200's of the graphs as read).
  std::map<std::string, fs::path> owner;
  for (const fs::path& winners : files)
    for (const std::string& key :
         query(winners, "SELECT DISTINCT r.model || ':' || r.dtype || ':' || r.heads || ':' || r.dim || ':' || r.direction "
                        "|| ':' || r.key_bits || ' ' || f.hash FROM results r JOIN fingerprints f ON f.id = r.fingerprint_id")) {
      const auto [it, added] = owner.emplace(key, winners);
      EXPECT_TRUE(added || it->second == winners) << "op and graph " << key << " are in both " << it->second << " and "
                                                  << winners;
    }
  EXPECT_GT(owner.size(), 3000u);
}

// The zoo's default dispatch on Cora, as GATConv (self-loops) and as read: every module is there.
TEST(ShippedModules, FreshContextCompilesNothingForTheZooOnCora) {
  ASSERT_TRUE(fs::exists(kShipped)) << kShipped << " is missing; " << kRebuild;
  ShippedDb shipped(kShipped.string());
  ScratchDir dir;
  int configs = 0;
  for (const ZooEntry& z : read_zoo()) {
    ++configs;
    const dfgnn_op_t op = z.op();
    for (bool loops : {true, false}) {
      const fs::path user = dir.path / ("user-" + std::to_string(configs) + (loops ? "l" : "") + ".db");
      EXPECT_EQ(compiles_for(user, op.model, op.dtype, op.heads, op.dim, loops), 0u)
          << z.model << " H " << z.heads << " D " << z.dim << " " << z.dtype << (loops ? " with self-loops" : "")
          << ": a module of its default dispatch is not shipped; " << kRebuild;
    }
  }
  EXPECT_GE(configs, 20);
}

TEST(ShippedModules, StaleOrDamagedModulesAreCompiledAgain) {
  ScratchDir dir;
  const fs::path made = dir.path / "made.db";
  {
    ShippedDb none("off");  // no shipped layer: the first context compiles and stores
    EXPECT_GT(compiles_for(made, DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 8, 8, true), 0u);
  }
  // Stored compressed: the magic, and smaller than the cubin it holds.
  const std::vector<std::string> magic = query(made, "SELECT DISTINCT substr(image, 1, 6) FROM modules");
  EXPECT_EQ(magic, std::vector<std::string>{"DFGNNZ"});
  const fs::path stale = dir.path / "stale.db", damaged = dir.path / "damaged.db";
  fs::copy_file(made, stale);
  fs::copy_file(made, damaged);
  query(stale, "UPDATE modules SET template_hash = 'another-kernel-source'");
  query(damaged, "UPDATE modules SET image = substr(image, 1, 40)");
  {
    ShippedDb shipped(made.string());
    EXPECT_EQ(compiles_for(dir.path / "u1.db", DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 8, 8, true), 0u);
  }
  for (const fs::path& bad : {stale, damaged}) {
    ShippedDb shipped(bad.string());
    EXPECT_GT(compiles_for(dir.path / ("u-" + bad.stem().string() + ".db"), DFGNN_MODEL_GAT, DFGNN_DTYPE_FLOAT32, 8, 8,
                           true),
              0u)
        << bad;
  }
}

TEST(ShippedModules, ImagesPackAndUnpack) {
  std::vector<char> cubin(5000);
  for (size_t i = 0; i < cubin.size(); ++i) cubin[i] = static_cast<char>((i * 31) % 7);
  cubin[0] = '\x7f';
  const std::vector<char> packed = dfgnn::packed_module_image(cubin);
  EXPECT_LT(packed.size(), cubin.size());
  EXPECT_EQ(dfgnn::unpacked_module_image(packed), cubin);
  EXPECT_EQ(dfgnn::unpacked_module_image(cubin), cubin) << "a raw image (older databases) reads back as it is";
  std::vector<char> cut(packed.begin(), packed.begin() + 30);
  EXPECT_THROW(dfgnn::unpacked_module_image(cut), std::runtime_error);
  std::vector<char> huge = packed;
  for (int i = 8; i < 16; ++i) huge[i] = '\xff';  // a size field of 2^64 - 1
  EXPECT_THROW(dfgnn::unpacked_module_image(huge), std::runtime_error);
}
