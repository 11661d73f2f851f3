// Maintenance of tuning databases (db/src/maintenance.cpp): merge, export, prune and verify.
#include "db_test_util.hpp"

namespace {

using namespace dfgnn::test::db_test;

TEST(TuningDbMerge, IdempotentAndOrderIndependent) {
  TempDir dir;
  const fs::path a = dir / "a.db", b = dir / "b.db", c = dir / "c.db";
  const ModuleRecord ma{"mod-a", std::vector<char>(1000, 'a'), {"n1"}, {"l1"}, 90, 12080, "t-hash-1", 50};
  const ModuleRecord mb{"mod-b", std::vector<char>(1000, 'b'), {"n2"}, {"l2"}, 90, 12080, "t-hash-1", 60};
  const TuningRun a1 = make_run(h200(), op_gat(), 1, {cand(sched(32), 1.0), cand(sched(16), 1.1)}, "a1", 100, "node-a");
  {
    auto db = TuningDb::open_user(a);
    db->put_result(a1);
    db->put_result(make_run(h200(), op_gat(), 2, {cand(sched(32), 1.0), cand(sched(8), 0.8)}, "a2", 110, "node-a"));
    db->put_module(ma);
  }
  {
    auto db = TuningDb::open_user(b);
    db->put_result(a1);  // b already holds a1 (imported earlier)
    db->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1.4, 30), cand(sched(16), 1.05, 30)}, "b1", 120,
                            "node-b"));
    db->put_result(make_run(h200(), op_gat(), 3, {cand(sched(32), 1.0), cand(sched(4), 0.9)}, "b2", 130, "node-b"));
    db->put_module(ma);
    db->put_module(mb);
  }
  {
    auto db = TuningDb::open_user(c);
    db->put_result(make_run(h200(), op_gat(), 2, {cand(sched(32), 0.7), cand(sched(8), 0.9)}, "c1", 140, "node-c"));
    db->put_result(make_run(h200(), op_gat(), 3, {cand(sched(4), 1.5), cand(sched(16), 0.6)}, "c2", 150, "node-c"));
    db->put_result(make_run(a100(), op_gat(), 4, {cand(sched(32), 2.0)}, "c3", 160, "node-c"));
  }
  auto merged = [&](const std::vector<fs::path>& order, const std::string& name) {
    auto db = TuningDb::open_user(dir / name);
    for (const fs::path& src : order) db->merge_from(src);
    return db;
  };
  auto x = merged({a, b, c}, "x.db");
  auto y = merged({c, b, a}, "y.db");
  auto z = merged({b, c, a}, "z.db");
  const auto sx = snapshot(*x);
  EXPECT_EQ(sx.size(), 4u);
  EXPECT_EQ(snapshot(*y), sx);
  EXPECT_EQ(snapshot(*z), sx);
  // Pooled across nodes: problem 1 has runs a1 and b1 (a1 counted once), and the pooled winner
  // (lanes=16: (11 + 31.5) / 40 = 1.0625 vs lanes=32: (10 + 42) / 40 = 1.3) differs from a1's.
  auto p1 = x->find_exact(h200(), op_gat(), fp_hash(1));
  ASSERT_TRUE(p1);
  EXPECT_EQ(p1->runs, 2);
  EXPECT_EQ(p1->schedule, sched(16));
  EXPECT_NEAR(p1->stats.mean_ms, 1.0625, 1e-12);
  EXPECT_EQ(p1->host, "node-b");  // provenance of the latest run
  EXPECT_EQ(x->find_exact(a100(), op_gat(), fp_hash(4))->host, "node-c");
  // Merging again changes nothing.
  for (const fs::path& src : {a, b, c}) {
    const auto report = x->merge_from(src);
    EXPECT_EQ(report.runs_added, 0);
    EXPECT_EQ(report.modules_added, 0);
    EXPECT_GT(report.runs_present, 0);
  }
  EXPECT_EQ(snapshot(*x), sx);
  EXPECT_EQ(x->merge_from(dir / "y.db").runs_added, 0);  // a merged database into an equal one
  EXPECT_EQ(snapshot(*x), sx);
  for (auto* db : {x.get(), y.get(), z.get()}) {
    EXPECT_TRUE(db->get_module("mod-a"));
    EXPECT_TRUE(db->get_module("mod-b"));
    EXPECT_EQ(db->stats().modules, 2);
    EXPECT_EQ(db->stats().runs, 7);
    EXPECT_TRUE(db->verify().empty());
  }
  // Merging into a database that already has its own runs pools them too.
  auto own = TuningDb::open_user(a);
  own->merge_from(b);
  own->merge_from(c);
  EXPECT_EQ(snapshot(*own), sx);
  // A file that is not a database is a clear error.
  write_bytes(dir / "junk.db", std::string(5000, 'j'));
  EXPECT_EQ(expect_error([&] { x->merge_from(dir / "junk.db"); }).status(), DFGNN_STATUS_DATABASE_ERROR);
}

TEST(TuningDbExport, SnapshotOpensImmutableAndReplacesTarget) {
  TempDir dir;
  auto db = TuningDb::open_user(dir / "user.db");
  db->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1), cand(sched(8), 0.5)}));
  db->put_module(ModuleRecord{"m", std::vector<char>(10, 'x'), {"n"}, {"l"}, 90, 1, "t-hash-1", 0});
  const fs::path out = dir / "exports/site.db";
  db->export_to(out);
  db->put_result(make_run(h200(), op_gat(), 2, {cand(sched(32), 1)}));
  db->export_to(out);  // replaces the previous snapshot
  const std::string header = read_bytes(out).substr(0, 100);
  EXPECT_EQ(header[18], 1);  // rollback journal: opens immutable anywhere
  EXPECT_EQ(header[19], 1);
  EXPECT_EQ(raw_int(out, "PRAGMA user_version"), dfgnn::db::kSchemaVersion);
  auto site = TuningDb::open_site(out);
  EXPECT_EQ(snapshot(*site), snapshot(*db));
  EXPECT_TRUE(site->get_module("m"));
  EXPECT_TRUE(site->verify().empty());
  EXPECT_EQ(site->stats().results, 2);
  // Reads leave nothing next to an immutable file (no journal, no shared memory, no locks).
  for (const auto& entry : fs::directory_iterator(dir / "exports"))
    EXPECT_EQ(entry.path().filename(), "site.db") << entry.path();
  // A site database can be exported too (e.g. to re-ship it).
  site->export_to(dir / "copy.db");
  EXPECT_EQ(snapshot(*TuningDb::open_site(dir / "copy.db")), snapshot(*db));
}

TEST(TuningDbPrune, ByEnvironmentAgeAndLibraryVersion) {
  TempDir dir;
  auto db = TuningDb::open_user(dir / "t.db");
  EnvironmentInfo old_lib = h200();
  old_lib.library_version = "0.0.9";
  db->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1), cand(sched(8), 2)}, "old", 1000));
  db->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 3), cand(sched(8), 1)}, "new", 2000));
  db->put_result(make_run(a100(), op_gat(), 2, {cand(sched(32), 1)}, "a100", 2000));
  db->put_result(make_run(old_lib, op_gat(), 3, {cand(sched(32), 1)}, "lib", 2000));
  db->put_module(ModuleRecord{"m-old", std::vector<char>(4, 'x'), {"n"}, {"l"}, 90, 1, "t-hash-1", 500});
  db->put_module(ModuleRecord{"m-new", std::vector<char>(4, 'x'), {"n"}, {"l"}, 90, 1, "t-hash-1", 5000});
  EXPECT_EQ(expect_error([&] { db->prune({}); }).status(), DFGNN_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(db->find_exact(h200(), op_gat(), fp_hash(1))->runs, 2);

  dfgnn::db::PruneFilter by_class;
  by_class.env_class = dfgnn::db::environment_class(a100());
  auto r = db->prune(by_class);
  EXPECT_EQ(r.runs, 1);
  EXPECT_EQ(r.results, 1);
  EXPECT_EQ(r.modules, 0);  // modules are not pruned by environment class
  EXPECT_FALSE(db->find_exact(a100(), op_gat(), fp_hash(2)));

  dfgnn::db::PruneFilter by_age;
  by_age.older_than = 1500;
  r = db->prune(by_age);
  EXPECT_EQ(r.runs, 1);
  EXPECT_EQ(r.results, 0);
  EXPECT_EQ(r.modules, 1);
  auto left = db->find_exact(h200(), op_gat(), fp_hash(1));
  EXPECT_EQ(left->runs, 1);
  EXPECT_EQ(left->schedule, sched(8));  // recomputed from the remaining run
  EXPECT_FALSE(db->get_module("m-old"));
  EXPECT_TRUE(db->get_module("m-new"));

  dfgnn::db::PruneFilter by_lib;
  by_lib.library_version = "0.0.9";
  r = db->prune(by_lib);
  EXPECT_EQ(r.runs, 1);
  EXPECT_EQ(r.results, 1);
  const auto st = db->stats();
  EXPECT_EQ(st.results, 1);
  EXPECT_EQ(st.runs, 1);
  EXPECT_EQ(st.fingerprints, 1);   // unused fingerprints went with their results
  EXPECT_EQ(st.environments, 1);   // as did unused environments
  EXPECT_TRUE(db->verify().empty());
}

// verify judges every row as dispatch would use it: stored types, plausible statistics, text
// without control characters, each candidate through the validator, and the schema's objects.
// find_exact never returns a row that verify rejects.
TEST(TuningDbHostile, VerifyRejectsWhatDispatchWouldNotUse) {
  TempDir dir;
  const fs::path p = dir / "t.db";
  {
    auto db = TuningDb::open_user(p, with_validator());
    for (int k = 0; k < 6; ++k)
      db->put_result(make_run(h200(), op_gat(), k, {cand(sched(32), 1), cand(sched(8), 0.5)}, "run-" + std::to_string(k)));
  }
  ASSERT_TRUE(TuningDb::open_user(p, with_validator())->verify().empty());
  auto id_of = [&](int k) {
    return std::to_string(raw_int(p, "SELECT r.id FROM results r JOIN fingerprints f ON f.id = r.fingerprint_id "
                                     "WHERE f.hash = '" + fp_hash(k) + "'"));
  };
  auto run_of = [&](int k) { return std::to_string(raw_int(p, "SELECT id FROM runs WHERE uuid = 'run-" + std::to_string(k) + "'")); };
  // A candidate with an invalid schedule and an implausible mean, and a valid schedule with one.
  raw_exec(p, "INSERT INTO candidate_stats VALUES (" + run_of(0) + ", '" + sched(7) + "', 1, 10, 0.01, 0, 0.01, 0.01)");
  raw_exec(p, "INSERT INTO candidate_stats VALUES (" + run_of(0) + ", '" + sched(16) + "', 1, 10, 1e-300, 0, 1e-300, 1e-300)");
  raw_exec(p, "UPDATE candidate_stats SET solver_id = -7 WHERE run_id = " + run_of(1) + " AND schedule = '" + sched(32) + "'");
  raw_exec(p, "UPDATE results SET median_ms = 'fast' WHERE id = " + id_of(2));
  raw_exec(p, "UPDATE results SET host = 'evil' || char(27) || '[2J' || char(27) || '[31m' || char(10) || 'forged' "
              "WHERE id = " + id_of(3));
  raw_exec(p, "UPDATE results SET mean_ms = 1e-300 WHERE id = " + id_of(4));
  raw_exec(p, "UPDATE results SET solver_id = -7 WHERE id = " + id_of(5));
  raw_exec(p, "CREATE TRIGGER evil AFTER INSERT ON runs BEGIN DELETE FROM results; END");

  auto site = TuningDb::open_site(p, with_validator());  // reads are allowed, writes are not (below)
  for (int k : {2, 3, 4, 5}) EXPECT_FALSE(site->find_exact(h200(), op_gat(), fp_hash(k))) << k;
  EXPECT_EQ(site->find_exact(h200(), op_gat(), fp_hash(0))->schedule, sched(8));  // stored winner still valid
  EXPECT_EQ(site->candidates_for(h200(), op_gat()).size(), 2u);
  const std::vector<std::string> problems = site->verify();
  const std::string all = ::testing::PrintToString(problems);
  auto reported = [&](const std::string& a, const std::string& b) {
    for (const std::string& s : problems)
      if (contains(s, a) && contains(s, b)) return true;
    return false;
  };
  EXPECT_TRUE(reported("candidate " + sched(7), "lanes 7 out of range")) << all;
  EXPECT_TRUE(reported("candidate " + sched(16), "mean 1e-300 ms is not a plausible time")) << all;
  EXPECT_TRUE(reported("candidate " + sched(32), "solver id -7")) << all;
  EXPECT_TRUE(reported("result " + id_of(2), "results.median_ms: holds a TEXT value, not a number")) << all;
  EXPECT_TRUE(reported("result " + id_of(3), "results.host: control character 0x1b")) << all;
  EXPECT_TRUE(reported("result " + id_of(4), "mean 1e-300 ms")) << all;
  EXPECT_TRUE(reported("result " + id_of(5), "solver id -7")) << all;
  EXPECT_TRUE(reported("schema: unknown trigger \"evil\"", "runs")) << all;
  for (const std::string& s : problems) EXPECT_TRUE(dfgnn::db::detail::unprintable(s).empty()) << s;
  // Writing (a merge, a tuning run) into the file with the trigger is refused, naming it, and so is
  // exporting it; the file is left as it was.
  const std::string before = read_bytes(p);
  auto e = expect_error([&] { TuningDb::open_user(p, with_validator()); });
  EXPECT_TRUE(contains(e.what(), "unknown trigger \"evil\"")) << e.what();
  EXPECT_EQ(e.kind(), dfgnn::db::ErrorKind::Schema);
  e = expect_error([&] { site->export_to(dir / "out.db"); });
  EXPECT_TRUE(contains(e.what(), "export refused")) << e.what();
  EXPECT_FALSE(fs::exists(dir / "out.db"));
  EXPECT_EQ(read_bytes(p), before);
  // Without the trigger it opens for writing again.
  raw_exec(p, "DROP TRIGGER evil");
  EXPECT_NO_THROW(TuningDb::open_user(p, with_validator()));
}

// A merge is one transaction: a write that fails midway (here a full disk, made with SQLite's
// max_page_count on every connection this process opens) commits nothing, and says so.
TEST(TuningDbMerge, FullDiskCommitsNothing) {
  TempDir dir;
  const fs::path src = dir / "src.db", dst = dir / "dst.db";
  {
    auto db = TuningDb::open_user(src);
    for (int k = 0; k < 600; ++k)
      db->put_result(make_run(h200(), op_gat(), k % 40,
                              {cand(sched(32), 1 + k % 7), cand(sched(16), 1.5), cand(sched(8), 0.8 + k % 3)},
                              fmt::format("src-run-{:04d}", k)));
  }
  {
    auto db = TuningDb::open_user(dst);
    db->put_result(make_run(h200(), op_gat(), 0, {cand(sched(4), 0.5)}, "dst-run"));
  }
  const int64_t empty_pages = pages_of(dst);
  {  // how large the full merge makes it
    fs::copy_file(dst, dir / "probe.db");
    TuningDb::open_user(dir / "probe.db")->merge_from(src);
  }
  const int64_t full_pages = pages_of(dir / "probe.db");
  ASSERT_GT(full_pages, empty_pages + 20);
  auto db = TuningDb::open_user(dst);
  const auto before = snapshot(*db);
  {
    PageLimit limit(static_cast<int>(empty_pages + (full_pages - empty_pages) / 2));  // the first chunks fit
    auto target = TuningDb::open_user(dst);
    const auto e = expect_error([&] { target->merge_from(src); });
    EXPECT_EQ(dfgnn::db_status(e), DFGNN_STATUS_DATABASE_ERROR);
    EXPECT_EQ(e.kind(), dfgnn::db::ErrorKind::DiskFull) << e.what();
    EXPECT_TRUE(contains(e.what(), "the disk is full")) << e.what();
    EXPECT_FALSE(contains(e.what(), "unreadable")) << e.what();
  }
  EXPECT_EQ(db->stats().runs, 1);  // not one run of the source committed
  EXPECT_EQ(snapshot(*db), before);
  EXPECT_TRUE(db->verify().empty());
  EXPECT_EQ(db->merge_from(src).runs_added, 600);  // with space, the same merge goes through
}

// What a process killed during its first open_user leaves (a zero-length file, or the bare header
// that switching to WAL writes): merging it merges nothing, with a note; opening it for writing
// initialises it.
TEST(TuningDbMerge, EmptySourceMergesNothing) {
  TempDir dir;
  const fs::path zero = dir / "zero.db", bare = dir / "bare.db", dst = dir / "dst.db";
  write_bytes(zero, "");
  raw_exec(bare, "PRAGMA journal_mode = WAL");
  ASSERT_GT(fs::file_size(bare), 0u);
  ASSERT_EQ(raw_int(bare, "PRAGMA user_version"), 0);
  auto db = TuningDb::open_user(dst);
  db->put_result(make_run(h200(), op_gat(), 0, {cand(sched(32), 1)}, "dst-run"));
  for (const fs::path& empty : {zero, bare}) {
    const auto before = snapshot(*db);
    const std::string bytes = read_bytes(empty);
    const dfgnn::db::MergeReport r = db->merge_from(empty);
    EXPECT_TRUE(r.source_empty) << empty;
    EXPECT_EQ(r.runs_added + r.runs_present + r.runs_rejected + r.modules_added, 0) << empty;
    EXPECT_EQ(read_bytes(empty), bytes) << empty;  // a merge never writes its source
    EXPECT_EQ(snapshot(*db), before);
    // open_read_only (dfgnn-db list / show) still says it holds no database.
    EXPECT_TRUE(contains(expect_error([&] { TuningDb::open_read_only(empty, {}); }).what(), "empty file")) << empty;
    // The next open for writing initialises it, and then it merges like any database.
    TuningDb::open_user(empty)->put_result(make_run(h200(), op_gat(), 1, {cand(sched(8), 1)}, "run-" + empty.stem().string()));
    const dfgnn::db::MergeReport full = db->merge_from(empty);
    EXPECT_FALSE(full.source_empty);
    EXPECT_EQ(full.runs_added, 1) << empty;
  }
  EXPECT_EQ(db->stats().runs, 3);
  EXPECT_TRUE(db->verify().empty());
}

// A damaged source found after its runs were read (its modules' key index) merges nothing.
TEST(TuningDbMerge, DamagedSourceModulesCommitNothing) {
  TempDir dir;
  const fs::path src = dir / "src.db", snap = dir / "snap.db", dst = dir / "dst.db";
  {
    auto db = TuningDb::open_user(src);
    for (int k = 0; k < 200; ++k)
      db->put_result(make_run(h200(), op_gat(), k % 20, {cand(sched(32), 1), cand(sched(8), 0.5)},
                              fmt::format("run-{:04d}", k)));
    for (int k = 0; k < 40; ++k)
      db->put_module(ModuleRecord{fmt::format("module-{:03d}", k), std::vector<char>(300, 'm'), {"n"}, {"l"}, 90,
                                  12080, "t-hash-1", 0});
    db->export_to(snap);  // a rollback-journal file: its pages are where the header says
  }
  const int64_t root = raw_int(snap, "SELECT rootpage FROM sqlite_master WHERE name = 'sqlite_autoindex_modules_1'");
  const int64_t page_size = raw_int(snap, "PRAGMA page_size");
  ASSERT_GT(root, 1);
  std::string bytes = read_bytes(snap);
  for (int64_t i = 0; i < page_size; ++i) bytes[static_cast<size_t>((root - 1) * page_size + i)] = static_cast<char>(0xff);
  write_bytes(snap, bytes);
  auto db = TuningDb::open_user(dst);
  const auto e = expect_error([&] { db->merge_from(snap); });
  EXPECT_EQ(e.kind(), dfgnn::db::ErrorKind::Corrupt) << e.what();
  EXPECT_TRUE(contains(e.what(), snap.string())) << e.what();
  EXPECT_EQ(db->stats().runs, 0);
  EXPECT_EQ(db->stats().modules, 0);
  EXPECT_EQ(read_bytes(snap), bytes);  // the source is left as it was
}

// Leftovers of an export killed with SIGKILL are removed by the next export to that path; a live
// writer's temporary file, and files of other names, are not.
TEST(TuningDbExport, KilledExportsLeaveNoTempFilesBehind) {
  TempDir dir;
  {
    auto db = TuningDb::open_user(dir / "user.db");
    for (int k = 0; k < 300; ++k)
      db->put_result(make_run(h200(), op_gat(), k, {cand(sched(32), 1), cand(sched(8), 0.5), cand(sched(4), 0.7)}));
  }
  const fs::path out = dir / "out/site.db";
  auto temps = [&] {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(out.parent_path(), ec))
      if (contains(entry.path().filename().string(), ".tmp-")) names.push_back(entry.path().filename().string());
    return names;
  };
  // Kill exporting children until one leaves a temporary file behind.
  fs::create_directories(out.parent_path());
  bool left = false;
  std::mt19937 rng(3);
  for (int attempt = 0; attempt < 60 && !left; ++attempt) {
    const pid_t child = spawn([&] {
      auto db = TuningDb::open_read_only(dir / "user.db", {});
      for (;;) db->export_to(out);
      return 0;
    });
    std::this_thread::sleep_for(std::chrono::microseconds(2000 + rng() % 20000));
    kill(child, SIGKILL);
    wait_exit(child);
    left = !temps().empty();
  }
  ASSERT_TRUE(left) << "no SIGKILL landed during an export";
  // A dead writer's file made by hand (with a journal), a live writer's (this process), a foreign name.
  pid_t dead = spawn([] { return 0; });
  wait_exit(dead);
  const fs::path stale = dfgnn::db::export_temp_path(out, dead, 4242, "00112233aabb");
  write_bytes(stale, "partial");
  write_bytes(fs::path(stale.string() + "-journal"), "partial");
  const fs::path live =
      dfgnn::db::export_temp_path(out, getpid(), dfgnn::db::process_start_ticks(getpid()), "445566778899");
  write_bytes(live, "in progress");
  write_bytes(fs::path(out.string() + ".tmp-notours"), "x");
  TuningDb::open_read_only(dir / "user.db", {})->export_to(out);
  std::vector<std::string> expected = {live.filename().string(), "site.db.tmp-notours"};
  std::vector<std::string> found = temps();
  std::sort(expected.begin(), expected.end());
  std::sort(found.begin(), found.end());
  EXPECT_EQ(found, expected);
  EXPECT_EQ(TuningDb::open_site(out)->stats().results, 300);
}

// A process id is reused within minutes on a busy host (pid_max is often 32768): the temp file of
// a dead exporter whose number now belongs to another process is stale all the same.
TEST(TuningDbExport, TempFileOfAReusedPidIsStale) {
  TempDir dir;
  TuningDb::open_user(dir / "user.db")->put_result(make_run(h200(), op_gat(), 0, {cand(sched(32), 1)}));
  const fs::path out = dir / "site.db";
  const int64_t started = dfgnn::db::process_start_ticks(getpid());
  ASSERT_GT(started, 0) << "no /proc/self/stat";
  EXPECT_EQ(dfgnn::db::process_start_ticks(getpid()), started);
  const fs::path reused = dfgnn::db::export_temp_path(out, getpid(), started + 1, "0123456789ab");
  const fs::path mine = dfgnn::db::export_temp_path(out, getpid(), started, "ba9876543210");
  for (const fs::path& p : {reused, fs::path(reused.string() + "-journal"), mine}) write_bytes(p, "partial");
  TuningDb::open_read_only(dir / "user.db", {})->export_to(out);
  EXPECT_FALSE(fs::exists(reused));
  EXPECT_FALSE(fs::exists(reused.string() + "-journal"));
  EXPECT_TRUE(fs::exists(mine));  // this very process's: in progress
  EXPECT_EQ(TuningDb::open_site(out)->stats().results, 1);
}

// An export that fails on a full filesystem removes its temp file and whatever SQLite made beside
// it: a snapshot larger than SQLite's page cache spills pages early, after writing a rollback
// journal that SQLite keeps when the disk then fills up. Tried with no free byte at all, with less
// space than the page cache, and at every page around the snapshot's size. Needs a private tmpfs
// (as FullAndReadOnlyDisksAreNamed).
TEST(TuningDbExport, FullDiskExportLeavesNoFiles) {
  TempDir dir;
  {
    auto db = TuningDb::open_user(dir / "user.db");
    for (int k = 0; k < 50; ++k)
      db->put_result(make_run(h200(), op_gat(), k, {cand(sched(32), 1 + k % 5), cand(sched(8), 0.8 + k % 3)}));
    for (int k = 0; k < 40; ++k)  // 4 MB of modules: twice SQLite's default page cache
      db->put_module(ModuleRecord{fmt::format("module-{:03d}", k), std::vector<char>(100000, static_cast<char>('a' + k % 26)),
                                  {"n"}, {"l"}, 90, 12080, "t-hash-1", 0});
    db->export_to(dir / "probe.db");
  }
  const int64_t snapshot_pages = static_cast<int64_t>(fs::file_size(dir / "probe.db")) / 4096;
  ASSERT_GT(snapshot_pages, 900);
  std::vector<int64_t> sizes = {0, 256, 512, 750};  // pages of 4 KiB; 0: filled up with a ballast file
  for (int64_t pages = snapshot_pages - 3; pages <= snapshot_pages + 8; ++pages) sizes.push_back(pages);
  const fs::path mnt = dir / "mnt";
  fs::create_directories(mnt);
  const pid_t child = spawn([&]() -> int {
    if (!enter_private_mounts()) return 77;
    auto db = TuningDb::open_read_only(dir / "user.db", {});
    int failures = 0, full = 0, fitted = 0;
    for (const int64_t pages : sizes) {
      if (mount("tmpfs", mnt.c_str(), "tmpfs", 0, fmt::format("size={}", std::max<int64_t>(pages, 64) * 4096).c_str()) != 0)
        return 77;
      if (pages == 0) {
        std::ofstream fill(mnt / "out.db", std::ios::binary);  // the ballast (named as the output, which it replaces)
        const std::string block(4096, 'f');
        while (fill.write(block.data(), block.size())) {
        }
      }
      try {
        db->export_to(mnt / "out.db");
        ++fitted;
      } catch (const dfgnn::db::DbError& e) {
        ++full;
        if (e.kind() != dfgnn::db::ErrorKind::DiskFull) {
          std::fprintf(stderr, "%lld pages: kind %s: %s\n", static_cast<long long>(pages),
                       dfgnn::db::error_kind_name(e.kind()), e.what());
          ++failures;
        }
      }
      for (const auto& entry : fs::directory_iterator(mnt))
        if (entry.path().filename() != "out.db") {
          std::fprintf(stderr, "%lld pages: left behind: %s\n", static_cast<long long>(pages),
                       entry.path().filename().c_str());
          ++failures;
        }
      umount(mnt.c_str());
    }
    if (full < 5 || fitted == 0) {
      std::fprintf(stderr, "%d exports failed and %d fitted: the sizes missed the boundary\n", full, fitted);
      ++failures;
    }
    std::fflush(stderr);
    return failures;
  });
  const int code = wait_exit(child);
  if (code == 77) GTEST_SKIP() << "cannot mount a private tmpfs here (needs root or user namespaces)";
  EXPECT_EQ(code, 0) << "see the child's messages above";
}

}  // namespace
