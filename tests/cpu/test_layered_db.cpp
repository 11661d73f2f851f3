// The layered database (db/src/layered_db.cpp): user over sites over shipped, where the files are
// found from the environment and the install layout, and damaged, foreign or unusable layers.
#include "db_test_util.hpp"

namespace {

using namespace dfgnn::test::db_test;

struct ScopedEnv {
  std::map<std::string, std::optional<std::string>> saved;
  void set(const std::string& name, const char* value) {
    if (!saved.count(name)) {
      const char* old = std::getenv(name.c_str());
      saved[name] = old ? std::optional<std::string>(old) : std::nullopt;
    }
    if (value)
      setenv(name.c_str(), value, 1);
    else
      unsetenv(name.c_str());
  }
  ~ScopedEnv() {
    for (auto& [name, value] : saved)
      if (value)
        setenv(name.c_str(), value->c_str(), 1);
      else
        unsetenv(name.c_str());
  }
};

// The database logger's output while it lives (its sink removed again however the test ends).
class CapturedDbLog {
 public:
  CapturedDbLog() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(text_)) {
    dfgnn::db::detail::db_logger()->sinks().push_back(sink_);
  }
  ~CapturedDbLog() {
    auto& sinks = dfgnn::db::detail::db_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  std::string text() const { return text_.str(); }

 private:
  std::ostringstream text_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

// A module read through the layers says which layer and file it came from (explain's "module").
TEST(LayeredDb, ModuleLookupNamesTheLayerAndFileItCameFrom) {
  TempDir dir;
  ModuleRecord m;
  m.key = "feedbeef00000001";
  m.image = std::vector<char>(100, 'x');
  m.names = {"dfgnn::fwd<1>"};
  m.lowered = {"_Z3fwdILi1EEvv"};
  m.arch = 90;
  m.nvrtc_version = 13000;
  m.template_hash = "t-hash";
  ModuleRecord user_only = m;
  user_only.key = "feedbeef00000002";
  TuningDb::open_user(dir / "site.db")->put_module(m);
  TuningDb::open_user(dir / "user.db")->put_module(user_only);
  LayeredDb::Options lo;
  lo.user_path = dir / "user.db";
  lo.site_paths = std::vector<fs::path>{dir / "site.db"};
  LayeredDb layered(lo);
  const auto from_site = layered.get_module(m.key, "t-hash", 13000, 90);
  ASSERT_TRUE(from_site);
  EXPECT_EQ(from_site->layer, "site");
  EXPECT_EQ(from_site->source, (dir / "site.db").string());
  EXPECT_EQ(from_site->image, m.image);
  const auto from_user = layered.get_module(user_only.key, "t-hash", 13000, 90);
  ASSERT_TRUE(from_user);
  EXPECT_EQ(from_user->layer, "user");
  EXPECT_EQ(from_user->source, (dir / "user.db").string());
  EXPECT_FALSE(layered.get_module(m.key, "another-hash", 13000, 90));  // a stale module is no answer
}

TEST(LayeredDb, DefaultPathsFromEnvironment) {
  ScopedEnv env;
  env.set("DFGNN_CACHE_DIR", "/tmp/dfgnn-cache");
  env.set("XDG_CACHE_HOME", "/tmp/xdg");
  env.set("HOME", "/home/someone");
  EXPECT_EQ(LayeredDb::default_user_path(), fs::path("/tmp/dfgnn-cache/tuning.db"));
  env.set("DFGNN_CACHE_DIR", nullptr);
  EXPECT_EQ(LayeredDb::default_user_path(), fs::path("/tmp/xdg/dfgnn/tuning.db"));
  env.set("XDG_CACHE_HOME", "");
  EXPECT_EQ(LayeredDb::default_user_path(), fs::path("/home/someone/.cache/dfgnn/tuning.db"));
  env.set("HOME", nullptr);
  EXPECT_TRUE(LayeredDb::default_user_path().empty());
  env.set("DFGNN_SITE_DB", "/a/site.db::/b/site.db:");
  EXPECT_EQ(LayeredDb::default_site_paths(), (std::vector<fs::path>{"/a/site.db", "/b/site.db"}));
  env.set("DFGNN_SITE_DB", nullptr);
  EXPECT_TRUE(LayeredDb::default_site_paths().empty());
}

// The shipped layer: DFGNN_SHIPPED_DB names files or directories (their *.db files, by name) or
// switches it off; unset, the package's directory beside the library is searched.
TEST(LayeredDb, ShippedPathsFromEnvironmentAndInstallLayout) {
  TempDir dir;
  fs::create_directories(dir / "tuning");
  write_bytes(dir / "tuning/sm90.db", "x");
  write_bytes(dir / "tuning/sm80.db", "x");
  write_bytes(dir / "tuning/README.md", "x");
  ScopedEnv env;
  env.set("DFGNN_SHIPPED_DB", (dir / "tuning").c_str());
  EXPECT_EQ(LayeredDb::default_shipped_paths(), (std::vector<fs::path>{dir / "tuning/sm80.db", dir / "tuning/sm90.db"}));
  env.set("DFGNN_SHIPPED_DB", ((dir / "a.db").string() + "::" + (dir / "tuning").string()).c_str());
  EXPECT_EQ(LayeredDb::default_shipped_paths(),
            (std::vector<fs::path>{dir / "a.db", dir / "tuning/sm80.db", dir / "tuning/sm90.db"}));
  for (const char* off : {"off", "none", "0", ""}) {
    env.set("DFGNN_SHIPPED_DB", off);
    EXPECT_TRUE(LayeredDb::default_shipped_paths().empty()) << off;
  }
  // Python package: site-packages/dfgnn/libdfgnn.so -> dfgnn/data/tuning; its tools in dfgnn/bin.
  const auto wheel = LayeredDb::shipped_directory_candidates("/sp/dfgnn/libdfgnn.so.0");
  EXPECT_EQ(wheel.at(0), fs::path("/sp/dfgnn/data/tuning"));
  EXPECT_EQ(LayeredDb::shipped_directory_candidates("/sp/dfgnn/bin/dfgnn-db").at(1).lexically_normal(),
            fs::path("/sp/dfgnn/data/tuning"));
  // CMake install: <prefix>/lib/libdfgnn.so and <prefix>/bin/dfgnn-db -> <prefix>/share/dfgnn/tuning.
  const auto lib = LayeredDb::shipped_directory_candidates("/opt/dfgnn/lib/libdfgnn.so");
  EXPECT_NE(std::find_if(lib.begin(), lib.end(),
                         [](const fs::path& p) { return p.lexically_normal() == "/opt/dfgnn/share/dfgnn/tuning"; }),
            lib.end());
  // Unset here (the test binary's directory has no such layout): nothing.
  env.set("DFGNN_SHIPPED_DB", nullptr);
  EXPECT_TRUE(LayeredDb::shipped_directory().empty()) << LayeredDb::shipped_directory();
  EXPECT_TRUE(LayeredDb::default_shipped_paths().empty());
}

// Shipped databases are read after the sites; rows say which layer answered; a site or shipped
// database built for another GPU class or build is left out when the environment is known.
TEST(LayeredDb, ShippedBelowSitesAndForeignLayersSkipped) {
  TempDir dir;
  {
    auto s = TuningDb::open_user(dir / "site-src.db");
    s->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1), cand(sched(4), 0.5)}));
    s->export_to(dir / "site.db");
    auto p = TuningDb::open_user(dir / "shipped-src.db");
    p->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1), cand(sched(8), 0.5)}));
    p->put_result(make_run(h200(), op_gat(), 2, {cand(sched(32), 1), cand(sched(8), 0.5)}));
    p->export_to(dir / "shipped.db");
    EXPECT_EQ(p->build_stamps().size(), 1u);
    EXPECT_EQ(p->build_stamps().at(0).results, 2);
    EXPECT_EQ(p->build_stamps().at(0).env_class, dfgnn::db::environment_class(h200()));
  }
  LayeredDb::Options o;
  o.user_path = fs::path();
  o.site_paths = std::vector<fs::path>{dir / "site.db"};
  o.shipped_paths = std::vector<fs::path>{dir / "shipped.db", dir / "site.db"};  // the site is read once
  {
    LayeredDb layered(o);
    ASSERT_EQ(layered.layers().size(), 2u);
    EXPECT_EQ(layered.layers()[1].kind, dfgnn::db::LayerKind::Shipped);
    EXPECT_TRUE(layered.layers()[1].used);
    const auto r1 = layered.find_exact(h200(), op_gat(), fp_hash(1));
    EXPECT_EQ(r1->layer, "site");
    EXPECT_EQ(r1->schedule, sched(4));
    const auto r2 = layered.find_exact(h200(), op_gat(), fp_hash(2));
    EXPECT_EQ(r2->layer, "shipped");
    EXPECT_EQ(r2->source, (dir / "shipped.db").string());
    for (const TuningResult& r : layered.candidates_for(h200(), op_gat()))
      EXPECT_EQ(r.layer, r.fingerprint_hash == fp_hash(1) ? "site" : "shipped");
  }
  o.environment = a100();  // another architecture
  LayeredDb foreign(o);
  ASSERT_EQ(foreign.layers().size(), 2u);
  for (const auto& l : foreign.layers()) {
    EXPECT_FALSE(l.used);
    EXPECT_TRUE(contains(l.reason, "tuned for another GPU")) << l.reason;
  }
  EXPECT_TRUE(foreign.shipped().empty());
  EXPECT_TRUE(foreign.open_errors().empty());  // not an error: a database for another GPU
}

// A read-only layer tuned on another GPU of this architecture answers for this one with its
// results (an H100 reads the H200's sm90.db), unless it holds results of this GPU's own class; of
// several such GPUs, the one with this GPU's SM count first. Another build is still skipped.
TEST(LayeredDb, AnotherGpuOfTheSameArchitectureAnswers) {
  TempDir dir;
  dfgnn::db::EnvironmentInfo h100 = h200();
  h100.gpu_name = "NVIDIA H100 80GB HBM3";
  dfgnn::db::EnvironmentInfo pcie = h200();
  pcie.gpu_name = "NVIDIA H100 PCIe";
  pcie.sm_count = 114;
  {
    auto p = TuningDb::open_user(dir / "src.db");
    p->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1), cand(sched(8), 0.5)}));
    p->put_result(make_run(pcie, op_gat(), 1, {cand(sched(32), 1), cand(sched(16), 0.5)}));
    p->put_result(make_run(pcie, op_gat(), 2, {cand(sched(32), 1), cand(sched(16), 0.5)}));
    p->export_to(dir / "sm90.db");
  }
  LayeredDb::Options o;
  o.user_path = fs::path();
  o.site_paths = std::vector<fs::path>{};
  o.shipped_paths = std::vector<fs::path>{dir / "sm90.db"};
  o.environment = h100;
  {
    CapturedDbLog log;
    const auto logger = dfgnn::db::detail::db_logger();
    const spdlog::level::level_enum level = logger->level();
    logger->set_level(spdlog::level::info);  // the line is an info line: expected, not a fault
    LayeredDb layered(o);
    logger->set_level(level);
    ASSERT_EQ(layered.layers().size(), 1u);
    EXPECT_TRUE(layered.layers()[0].used);
    EXPECT_EQ(layered.layers()[0].tuned_on, dfgnn::db::environment_class(h200()));  // 132 SMs, as this one
    const auto r = layered.find_exact(h100, op_gat(), fp_hash(1));
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->schedule, sched(8));
    EXPECT_EQ(r->layer, "shipped");
    EXPECT_FALSE(layered.find_exact(h100, op_gat(), fp_hash(2)).has_value());  // only the PCIe card has it
    EXPECT_EQ(layered.candidates_for(h100, op_gat()).size(), 1u);
    EXPECT_TRUE(contains(log.text(), "holds no results of this build for this GPU (" + dfgnn::db::environment_class(h100) +
                                         "); it answers with those tuned on " + dfgnn::db::environment_class(h200())))
        << log.text();
  }
  // A GPU with results of its own class reads those; another build or architecture reads nothing.
  o.environment = pcie;
  {
    LayeredDb layered(o);
    EXPECT_EQ(layered.layers()[0].tuned_on, "");
    EXPECT_EQ(layered.find_exact(pcie, op_gat(), fp_hash(1))->schedule, sched(16));
  }
  // No sibling with this SM count: of the others, the one with the most results answers (the PCIe card's 2).
  dfgnn::db::EnvironmentInfo odd = h200();
  odd.gpu_name = "NVIDIA H100 NVL";
  odd.sm_count = 100;
  o.environment = odd;
  {
    LayeredDb layered(o);
    EXPECT_EQ(layered.layers()[0].tuned_on, dfgnn::db::environment_class(pcie));
    EXPECT_EQ(layered.find_exact(odd, op_gat(), fp_hash(2))->schedule, sched(16));
  }
  dfgnn::db::EnvironmentInfo rebuilt = h100;
  rebuilt.template_hash = "t-hash-2";
  for (const dfgnn::db::EnvironmentInfo& env : {rebuilt, a100()}) {
    o.environment = env;
    LayeredDb layered(o);
    EXPECT_FALSE(layered.layers()[0].used) << env.gpu_name;
    EXPECT_TRUE(layered.shipped().empty());
  }
}

// A shipped file that opens but fails on reading (damaged pages) is dropped after the first failing
// read, with one warning however many lookups follow; the file is left as it was.
TEST(LayeredDb, DamagedShippedPagesWarnOnceAndAreDropped) {
  TempDir dir;
  {
    auto s = TuningDb::open_user(dir / "src.db");
    for (int k = 1; k <= 40; ++k) s->put_result(make_run(h200(), op_gat(), k, {cand(sched(32), 1), cand(sched(4), 0.5)}));
    s->export_to(dir / "shipped.db");
  }
  std::string bytes = read_bytes(dir / "shipped.db");
  const size_t page = 4096;
  ASSERT_GT(bytes.size(), 4 * page);
  for (size_t i = page; i < bytes.size(); ++i) bytes[i] = static_cast<char>(0xA5 ^ (i * 131));  // all but page 1
  write_bytes(dir / "shipped.db", bytes);
  CapturedDbLog log;
  LayeredDb::Options o;
  o.user_path = fs::path();
  o.site_paths = std::vector<fs::path>{};
  o.shipped_paths = std::vector<fs::path>{dir / "shipped.db"};
  std::optional<LayeredDb> layered;
  try {
    layered.emplace(o);
  } catch (...) {
    ADD_FAILURE() << "LayeredDb threw";
  }
  for (int k = 1; k <= 3; ++k) {
    EXPECT_FALSE(layered->find_exact(h200(), op_gat(), fp_hash(k)));
    EXPECT_TRUE(layered->candidates_for(h200(), op_gat()).empty());
  }
  const std::string text = log.text();
  int lines = 0;
  for (char c : text) lines += c == '\n';
  EXPECT_EQ(lines, 1) << text;
  EXPECT_TRUE(contains(text, "shipped")) << text;
  EXPECT_TRUE(contains(text, (dir / "shipped.db").string())) << text;
  EXPECT_EQ(read_bytes(dir / "shipped.db"), bytes);
}

// Issue 26: a site layer whose results pages are damaged, before a good one. The lookup reaches the
// damaged pages (alone, the same query fails as damaged); through the layers it answers from the good
// one, never throws, logs the damaged layer once and skips it for the rest of the process: a second
// LayeredDb (another context) reads it no more, with or without the GPU's identity.
TEST(LayeredDb, QueryOnDamagedPagesSkipsTheLayerForTheProcess) {
  TempDir dir;
  {
    auto bad = TuningDb::open_user(dir / "bad-src.db");
    auto good = TuningDb::open_user(dir / "good-src.db");
    for (int k = 0; k < 300; ++k) {
      bad->put_result(make_run(h200(), op_gat(), k, {cand(sched(32), 1), cand(sched(4), 0.5)}));
      good->put_result(make_run(h200(), op_gat(), k, {cand(sched(32), 1), cand(sched(8), 0.5)}));
    }
    bad->export_to(dir / "damaged.db");
    good->export_to(dir / "good.db");
  }
  ASSERT_GT(dfgnn::test::damage_leaf_pages(dir / "damaged.db", "results"), 3);
  {
    auto alone = TuningDb::open_site(dir / "damaged.db");
    EXPECT_EQ(expect_error([&] { alone->find_exact(h200(), op_gat(), fp_hash(150)); }).kind(),
              dfgnn::db::ErrorKind::Corrupt);
  }
  CapturedDbLog log;
  LayeredDb::Options o;
  o.user_path = fs::path();
  o.site_paths = std::vector<fs::path>{dir / "damaged.db", dir / "good.db"};
  o.shipped_paths = std::vector<fs::path>{};
  {
    LayeredDb first(o);
    std::optional<TuningResult> r;
    EXPECT_NO_THROW(r = first.find_exact(h200(), op_gat(), fp_hash(150)));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->schedule, sched(8));
    EXPECT_EQ(r->source, (dir / "good.db").string());
  }
  for (bool with_environment : {false, true}) {
    SCOPED_TRACE(with_environment ? "with the GPU's identity" : "without the GPU's identity");
    LayeredDb::Options again = o;
    if (with_environment) again.environment = h200();
    LayeredDb later(again);
    std::vector<TuningResult> all;
    EXPECT_NO_THROW(all = later.candidates_for(h200(), op_gat()));
    EXPECT_EQ(all.size(), 300u);
    for (const TuningResult& r : all) EXPECT_EQ(r.source, (dir / "good.db").string());
    ASSERT_EQ(later.layers().size(), 2u);
    EXPECT_FALSE(later.layers()[0].used);
    EXPECT_TRUE(contains(later.layers()[0].reason, "damaged")) << later.layers()[0].reason;
    EXPECT_EQ(later.sites().size(), 1u);
  }
  const std::string text = log.text();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  EXPECT_TRUE(contains(text, "site tuning database " + (dir / "damaged.db").string() + " is damaged")) << text;
}

TEST(LayeredDb, UserOverSitesWritesToUserOnly) {
  TempDir dir;
  {
    auto s1 = TuningDb::open_user(dir / "s1-src.db");
    s1->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1), cand(sched(4), 0.5)}));
    s1->put_result(make_run(h200(), op_gat(), 2, {cand(sched(32), 1), cand(sched(4), 0.5)}));
    s1->put_module(ModuleRecord{"site-mod", std::vector<char>(4, 's'), {"n"}, {"l"}, 90, 1, "t-hash-1", 0});
    s1->export_to(dir / "s1.db");
    auto s2 = TuningDb::open_user(dir / "s2-src.db");
    s2->put_result(make_run(h200(), op_gat(), 2, {cand(sched(32), 1), cand(sched(8), 0.5)}));
    s2->put_result(make_run(h200(), op_gat(), 3, {cand(sched(32), 1), cand(sched(8), 0.5)}));
    s2->export_to(dir / "s2.db");
    auto u = TuningDb::open_user(dir / "cache/tuning.db");
    u->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1), cand(sched(16), 0.5)}));
  }
  ScopedEnv env;
  env.set("DFGNN_CACHE_DIR", (dir / "cache").c_str());
  env.set("DFGNN_SITE_DB", ((dir / "s1.db").string() + ":" + (dir / "s2.db").string()).c_str());
  const std::string s1_bytes = read_bytes(dir / "s1.db");
  LayeredDb layered;  // paths from the environment
  ASSERT_NE(layered.user(), nullptr);
  EXPECT_EQ(layered.user()->path(), dir / "cache/tuning.db");
  ASSERT_EQ(layered.sites().size(), 2u);
  EXPECT_TRUE(layered.open_errors().empty());
  auto r1 = layered.find_exact(h200(), op_gat(), fp_hash(1));
  EXPECT_EQ(r1->schedule, sched(16));  // the user's, over site 1's
  EXPECT_EQ(r1->source, (dir / "cache/tuning.db").string());
  auto r2 = layered.find_exact(h200(), op_gat(), fp_hash(2));
  EXPECT_EQ(r2->schedule, sched(4));  // site 1 over site 2
  EXPECT_EQ(r2->source, (dir / "s1.db").string());
  EXPECT_EQ(layered.find_exact(h200(), op_gat(), fp_hash(3))->schedule, sched(8));
  EXPECT_FALSE(layered.find_exact(h200(), op_gat(), fp_hash(4)));
  const auto all = layered.candidates_for(h200(), op_gat());
  ASSERT_EQ(all.size(), 3u);
  for (const TuningResult& r : all)
    if (r.fingerprint_hash == fp_hash(1)) EXPECT_EQ(r.schedule, sched(16));
  EXPECT_TRUE(layered.get_module("site-mod"));
  // Writes land in the user database; the sites are never modified.
  layered.put_result(make_run(h200(), op_gat(), 4, {cand(sched(32), 1)}));
  layered.put_module(ModuleRecord{"user-mod", std::vector<char>(4, 'u'), {"n"}, {"l"}, 90, 1, "t-hash-1", 0});
  EXPECT_TRUE(layered.find_exact(h200(), op_gat(), fp_hash(4)));
  EXPECT_EQ(layered.user()->stats().results, 2);
  EXPECT_EQ(read_bytes(dir / "s1.db"), s1_bytes);
  EXPECT_FALSE(fs::exists(dir / "s1.db-wal"));
  EXPECT_FALSE(fs::exists(dir / "s1.db-shm"));
}

// A read-only layer (opened immutable: it never changes under the process) is read once per op key
// and row: a first dispatch's rows and neighbour statistics are kept. The user layer, which other
// processes write, is read every time. Rows read are counted by the validator, which sees each one.
TEST(LayeredDb, ReadOnlyLayersAreReadOncePerKeyTheUserLayerEveryTime) {
  TempDir dir;
  {
    auto site = TuningDb::open_user(dir / "site-src.db");
    site->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1), cand(sched(4), 0.5)}));
    site->put_result(make_run(h200(), op_gat(), 2, {cand(sched(32), 1), cand(sched(4), 0.5)}));
    site->put_result(make_run(h200(), op_gat(1), 1, {cand(sched(32), 1), cand(sched(8), 0.25)}));
    site->export_to(dir / "site.db");
  }
  std::map<std::string, int> reads;  // rows read, by source file name
  LayeredDb::Options options;
  options.user_path = dir / "user.db";
  options.site_paths = std::vector<fs::path>{dir / "site.db"};
  options.shipped_paths = std::vector<fs::path>{};
  options.db.validator = [&](const TuningResult& r) {
    ++reads[fs::path(r.source).filename().string()];
    return std::string();
  };
  LayeredDb layered(options);
  const auto schedules_of = [](const std::vector<CandidateStat>& stats) {
    std::set<std::string> out;
    for (const CandidateStat& c : stats) out.insert(c.schedule);
    return out;
  };
  const auto first = layered.candidates_for(h200(), op_gat());
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].schedule, sched(4));
  EXPECT_EQ(reads["site.db"], 2);
  const auto pooled = layered.pooled_candidates(first[0]);
  EXPECT_EQ(schedules_of(pooled), (std::set<std::string>{sched(32), sched(4)}));

  const auto again = layered.candidates_for(h200(), op_gat());
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].schedule, sched(4));
  EXPECT_EQ(again[0].layer, "site");
  EXPECT_EQ(reads["site.db"], 2);  // from memory
  const auto pooled_again = layered.pooled_candidates(again[0]);
  ASSERT_EQ(pooled_again.size(), pooled.size());
  for (size_t i = 0; i < pooled.size(); ++i) {
    EXPECT_EQ(pooled_again[i].schedule, pooled[i].schedule);
    EXPECT_EQ(pooled_again[i].median_ms, pooled[i].median_ms);
  }
  // another op key of the same layer is a read of its own
  const auto backward = layered.candidates_for(h200(), op_gat(1));
  ASSERT_EQ(backward.size(), 1u);
  EXPECT_EQ(backward[0].schedule, sched(8));
  EXPECT_EQ(reads["site.db"], 3);

  // the user layer: a row written now is found now, and its rows are read on every lookup
  layered.put_result(make_run(h200(), op_gat(), 4, {cand(sched(32), 1), cand(sched(16), 0.5)}));
  const int user_reads = reads["user.db"];
  const auto with_user = layered.candidates_for(h200(), op_gat());
  ASSERT_EQ(with_user.size(), 3u);
  const auto user_row = std::find_if(with_user.begin(), with_user.end(),
                                     [](const TuningResult& r) { return r.fingerprint_hash == fp_hash(4); });
  ASSERT_NE(user_row, with_user.end());
  EXPECT_EQ(user_row->layer, "user");
  EXPECT_EQ(schedules_of(layered.pooled_candidates(*user_row)), (std::set<std::string>{sched(32), sched(16)}));
  layered.candidates_for(h200(), op_gat());
  EXPECT_EQ(reads["user.db"], user_reads + 2);
  EXPECT_EQ(reads["site.db"], 3);
}

TEST(LayeredDb, UnusableLayersAreSkippedAndKept) {
  TempDir dir;
  {
    auto s = TuningDb::open_user(dir / "src.db");
    s->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1)}));
    s->export_to(dir / "site.db");
  }
  write_bytes(dir / "garbage.db", std::string(3000, 'g'));
  LayeredDb::Options o;
  o.user_path = dir / "garbage.db";
  o.site_paths = std::vector<fs::path>{dir / "missing.db", dir / "garbage.db", dir / "site.db"};
  LayeredDb layered(o);
  EXPECT_EQ(layered.user(), nullptr);
  EXPECT_EQ(layered.sites().size(), 1u);
  EXPECT_EQ(layered.open_errors().size(), 3u);
  EXPECT_TRUE(layered.find_exact(h200(), op_gat(), fp_hash(1)));
  EXPECT_EQ(expect_error([&] { layered.put_result(make_run(h200(), op_gat(), 2, {cand(sched(32), 1)})); }).status(),
            DFGNN_STATUS_DATABASE_ERROR);
  EXPECT_EQ(read_bytes(dir / "garbage.db"), std::string(3000, 'g'));
  // No user database by choice.
  LayeredDb::Options none;
  none.user_path = fs::path();
  none.site_paths = std::vector<fs::path>{};
  LayeredDb empty(none);
  EXPECT_EQ(empty.user(), nullptr);
  EXPECT_TRUE(empty.open_errors().empty());
  EXPECT_FALSE(empty.find_exact(h200(), op_gat(), fp_hash(1)));
  EXPECT_TRUE(contains(expect_error([&] { empty.put_module(ModuleRecord{}); }).what(), "disabled"));
}

TEST(LayeredDb, UserDatabaseIsCreatedByTheFirstWriteNotByReads) {
  // A process that only reads (shipped answers, shipped modules) leaves no file behind and skips
  // its creation; another process's file is read once it appears; the first write creates it.
  TempDir dir;
  {
    auto site = TuningDb::open_user(dir / "site-src.db");
    site->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1), cand(sched(4), 0.5)}));
    site->export_to(dir / "site.db");
  }
  const fs::path user = dir / "cache" / "tuning.db";
  LayeredDb::Options options;
  options.user_path = user;
  options.site_paths = std::vector<fs::path>{dir / "site.db"};
  options.shipped_paths = std::vector<fs::path>{};
  LayeredDb reader(options);
  EXPECT_TRUE(reader.open_errors().empty());
  ASSERT_EQ(reader.layers().size(), 2u);
  EXPECT_EQ(reader.layers()[0].kind, dfgnn::db::LayerKind::User);
  EXPECT_TRUE(reader.layers()[0].used);
  EXPECT_EQ(reader.find_exact(h200(), op_gat(), fp_hash(1))->layer, "site");
  EXPECT_EQ(reader.candidates_for(h200(), op_gat()).size(), 1u);
  EXPECT_FALSE(reader.get_module("m"));
  EXPECT_FALSE(fs::exists(user));
  EXPECT_FALSE(fs::exists(dir / "cache"));

  // a file that cannot be read yet (another process mid-way, say) is passed over by reads, not given up on
  fs::create_directories(dir / "cache");
  write_bytes(user, std::string(3000, 'g'));
  EXPECT_EQ(reader.find_exact(h200(), op_gat(), fp_hash(1))->layer, "site");
  EXPECT_EQ(read_bytes(user), std::string(3000, 'g'));  // untouched
  fs::remove(user);

  {  // another process creates it and writes: the reader sees its rows at the next lookup
    LayeredDb writer(options);
    writer.put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1), cand(sched(16), 0.5)}));
    writer.put_module(ModuleRecord{"m", std::vector<char>(4, 'u'), {"n"}, {"l"}, 90, 1, "t-hash-1", 0});
  }
  ASSERT_TRUE(fs::exists(user));
  const auto mine = reader.find_exact(h200(), op_gat(), fp_hash(1));
  ASSERT_TRUE(mine);
  EXPECT_EQ(mine->layer, "user");
  EXPECT_EQ(mine->schedule, sched(16));
  EXPECT_TRUE(reader.get_module("m"));
  reader.put_result(make_run(h200(), op_gat(), 5, {cand(sched(32), 1)}));  // and it writes there
  EXPECT_EQ(reader.find_exact(h200(), op_gat(), fp_hash(5))->layer, "user");

  // the first write of a process that found no file creates it, directories included
  const fs::path fresh = dir / "other" / "nested" / "tuning.db";
  options.user_path = fresh;
  LayeredDb first(options);
  EXPECT_FALSE(fs::exists(fresh));
  first.put_result(make_run(h200(), op_gat(), 2, {cand(sched(32), 1)}));
  EXPECT_TRUE(fs::exists(fresh));
  EXPECT_EQ(first.find_exact(h200(), op_gat(), fp_hash(2))->layer, "user");

  // a path where no file can be created: reads answer from the other layers, the write says why
  write_bytes(dir / "blocker", "x");
  options.user_path = dir / "blocker" / "tuning.db";  // under a regular file
  LayeredDb blocked(options);
  EXPECT_TRUE(blocked.open_errors().empty());
  EXPECT_EQ(blocked.find_exact(h200(), op_gat(), fp_hash(1))->layer, "site");
  const auto e = expect_error([&] { blocked.put_result(make_run(h200(), op_gat(), 3, {cand(sched(32), 1)})); });
  EXPECT_EQ(dfgnn::db_status(e), DFGNN_STATUS_DATABASE_ERROR);
  EXPECT_TRUE(contains(e.what(), "unusable")) << e.what();
  EXPECT_TRUE(contains(e.what(), "blocker")) << e.what();
  EXPECT_EQ(blocked.user(), nullptr);
}

}  // namespace
