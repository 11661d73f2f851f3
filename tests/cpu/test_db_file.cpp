// The tuning database file (db/src/tuning_db.cpp, sqlite_util.*): garbage, truncated and corrupted
// files, a replaced snapshot under a reader, killed writers, full and read-only disks, and
// concurrent processes on one file.
#include "db_test_util.hpp"

namespace {

using namespace dfgnn::test::db_test;

TEST(TuningDbRobustness, GarbageFileGivesClearErrorAndIsKept) {
  TempDir dir;
  std::string garbage(8192, '\0');
  std::mt19937 rng(7);
  for (char& c : garbage) c = static_cast<char>(rng());
  for (const std::string& content : {garbage, std::string("SQLite format 3")}) {
    const fs::path p = dir / "garbage.db";
    write_bytes(p, content);
    const auto e = expect_error([&] { TuningDb::open_user(p); });
    EXPECT_EQ(dfgnn::db_status(e), DFGNN_STATUS_DATABASE_ERROR);
    EXPECT_TRUE(contains(e.what(), p.string())) << e.what();
    EXPECT_TRUE(contains(e.what(), "not an SQLite database")) << e.what();
    EXPECT_EQ(expect_error([&] { TuningDb::open_site(p); }).status(), DFGNN_STATUS_DATABASE_ERROR);
    EXPECT_EQ(read_bytes(p), content);
    EXPECT_FALSE(fs::exists(dir / "garbage.db-wal"));
  }
  // A valid header followed by garbage: SQLite's own message comes through.
  std::string header_then_garbage = garbage;
  {
    TuningDb::open_user(dir / "good.db")->put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1)}));
    TuningDb::open_user(dir / "good.db")->export_to(dir / "snap.db");
    const std::string good = read_bytes(dir / "snap.db");
    header_then_garbage = good.substr(0, 100);
    while (header_then_garbage.size() < good.size()) header_then_garbage += static_cast<char>(rng());
  }
  write_bytes(dir / "mixed.db", header_then_garbage);
  const auto e = expect_error([&] { TuningDb::open_user(dir / "mixed.db"); });
  EXPECT_EQ(dfgnn::db_status(e), DFGNN_STATUS_DATABASE_ERROR);
  EXPECT_TRUE(contains(e.what(), "SQLite")) << e.what();
  EXPECT_EQ(read_bytes(dir / "mixed.db"), header_then_garbage);
}

TEST(TuningDbRobustness, TruncatedFileGivesClearError) {
  TempDir dir;
  const fs::path p = dir / "t.db";
  {
    auto db = TuningDb::open_user(p);
    for (int k = 0; k < 40; ++k) db->put_result(make_run(h200(), op_gat(), k, {cand(sched(32), 1), cand(sched(8), 2)}));
    ModuleRecord m{"k1", std::vector<char>(200000, 'c'), {"n"}, {"l"}, 90, 12080, "t-hash-1", 0};
    db->put_module(m);
  }  // last connection closed: WAL checkpointed into the file
  ASSERT_FALSE(fs::exists(dir / "t.db-wal"));
  const std::string full = read_bytes(p);
  for (size_t keep : {full.size() / 2, size_t{4096}, size_t{50}}) {
    write_bytes(p, full.substr(0, keep));
    const auto e = expect_error([&] { TuningDb::open_user(p); });
    EXPECT_EQ(dfgnn::db_status(e), DFGNN_STATUS_DATABASE_ERROR);
    EXPECT_TRUE(contains(e.what(), p.string()));
    EXPECT_TRUE(contains(e.what(), keep >= 100 ? "truncated" : "not an SQLite database")) << e.what();
    EXPECT_EQ(read_bytes(p).size(), keep);  // untouched
    // The layered database falls back: no user database, reads answer nothing, writes say why.
    LayeredDb::Options lo;
    lo.user_path = p;
    lo.site_paths = std::vector<fs::path>{};
    LayeredDb layered(lo);
    EXPECT_EQ(layered.user(), nullptr);
    ASSERT_EQ(layered.open_errors().size(), 1u);
    EXPECT_FALSE(layered.find_exact(h200(), op_gat(), fp_hash(1)));
    const auto w = expect_error([&] { layered.put_result(make_run(h200(), op_gat(), 1, {cand(sched(32), 1)})); });
    EXPECT_EQ(dfgnn::db_status(w), DFGNN_STATUS_DATABASE_ERROR);
    EXPECT_TRUE(contains(w.what(), "unusable")) << w.what();
  }
}

// A reader of a path that exports keep replacing (rename over it) sees one whole snapshot or the
// next, never one file's size with another's header (a false "truncated file").
TEST(TuningDbRobustness, ReaderOfAReplacedSnapshotSeesOneWholeFile) {
  TempDir dir;
  const fs::path small = dir / "small.db", big = dir / "big.db", path = dir / "site.db";
  {
    auto db = TuningDb::open_user(dir / "user.db");
    db->put_result(make_run(h200(), op_gat(), 0, {cand(sched(32), 1)}));
    db->export_to(small);
    for (int k = 1; k < 400; ++k) db->put_result(make_run(h200(), op_gat(), k, {cand(sched(32), 1), cand(sched(8), 2)}));
    db->export_to(big);
  }
  ASSERT_GT(fs::file_size(big), 8 * fs::file_size(small));
  fs::copy_file(small, path);
  const pid_t swapper = spawn([&] {  // replaces path by the other snapshot, as fast as it can
    const fs::path tmp = dir / "site.db.next";
    for (uint64_t i = 0;; ++i) {
      if (link((i % 2 ? small : big).c_str(), tmp.c_str()) != 0 || rename(tmp.c_str(), path.c_str()) != 0) return 1;
    }
    return 0;
  });
  int opens = 0;
  std::vector<std::string> errors;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(4);
  while (std::chrono::steady_clock::now() < until || opens < 200) {
    try {
      const int64_t results = TuningDb::open_site(path)->stats().results;
      if (results != 1 && results != 400) errors.push_back(fmt::format("{} results", results));
    } catch (const std::exception& e) {
      errors.push_back(e.what());
    }
    ++opens;
  }
  kill(swapper, SIGKILL);
  wait_exit(swapper);
  EXPECT_TRUE(errors.empty()) << errors.size() << " of " << opens << " opens failed, e.g. " << errors.front();
}

TEST(TuningDbRobustness, CorruptedPagesAreErrorsOrMissesNeverCrashes) {
  TempDir dir;
  {
    auto db = TuningDb::open_user(dir / "t.db");
    for (int k = 0; k < 120; ++k)
      db->put_result(make_run(h200(), op_gat(), k, {cand(sched(32), 1), cand(sched(8), 0.5), cand(sched(4), 0.7)}));
    db->export_to(dir / "site.db");
  }
  std::string bytes = read_bytes(dir / "site.db");
  ASSERT_GT(bytes.size(), 40000u);
  for (size_t i = 4096 * 3; i < bytes.size() - 4096; i += 4096 * 3)  // every third page from the fourth
    for (size_t j = 0; j < 512; ++j) bytes[i + 300 + j] = static_cast<char>(0xA5 ^ j);
  write_bytes(dir / "site.db", bytes);
  int errors = 0, hits = 0, misses = 0;
  try {
    auto site = TuningDb::open_site(dir / "site.db");
    for (int k = 0; k < 120; ++k) {
      try {
        if (auto r = site->find_exact(h200(), op_gat(), fp_hash(k))) {
          EXPECT_EQ(r->schedule, sched(8));  // a hit is never a garbled row
          ++hits;
        } else {
          ++misses;
        }
      } catch (const dfgnn::db::DbError& e) {
        EXPECT_EQ(dfgnn::db_status(e), DFGNN_STATUS_DATABASE_ERROR);
        ++errors;
      }
    }
    EXPECT_FALSE(site->verify().empty());
  } catch (const dfgnn::db::DbError& e) {
    EXPECT_EQ(dfgnn::db_status(e), DFGNN_STATUS_DATABASE_ERROR);
    ++errors;
  }
  EXPECT_GT(errors + misses, 0);
  // Layered over a good user database: the user's answers still come, the broken site never throws.
  {
    auto user = TuningDb::open_user(dir / "user.db");
    user->put_result(make_run(h200(), op_gat(), 7, {cand(sched(16), 0.1)}));
  }
  LayeredDb::Options lo;
  lo.user_path = dir / "user.db";
  lo.site_paths = std::vector<fs::path>{dir / "site.db"};
  LayeredDb layered(lo);
  EXPECT_EQ(layered.find_exact(h200(), op_gat(), fp_hash(7))->schedule, sched(16));
  for (int k = 0; k < 120; ++k) EXPECT_NO_THROW(layered.find_exact(h200(), op_gat(), fp_hash(k)));
  EXPECT_NO_THROW(layered.candidates_for(h200(), op_gat()));
}

TEST(TuningDbRobustness, WriterKilledMidTransactionLeavesUsableDatabase) {
  TempDir dir;
  const fs::path p = dir / "t.db";
  {
    auto db = TuningDb::open_user(p);
    for (int k = 0; k < 5; ++k) db->put_result(make_run(h200(), op_gat(), k, {cand(sched(32), 1), cand(sched(8), 0.5)}));
  }
  const int64_t environments_before = raw_int(p, "SELECT count(*) FROM environments");
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  // The child holds the write lock and has written far more than the page cache (spilled into the
  // WAL) when it is killed.
  const pid_t child = spawn([&] {
    close(ready[0]);
    auto db = TuningDb::open_user(p);  // schema in place, WAL
    sqlite3* h = nullptr;
    if (sqlite3_open(p.c_str(), &h) != SQLITE_OK) return 10;
    sqlite3_busy_timeout(h, 10000);
    if (sqlite3_exec(h, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) != SQLITE_OK) return 11;
    sqlite3_stmt* s = nullptr;
    sqlite3_prepare_v2(h,
                       "INSERT INTO environments (env_class, gpu_name, compute_capability, sm_count, driver_version, "
                       "nvrtc_version, library_version, template_hash) VALUES ('x', ?1, 1, 1, 1, 1, 'v', "
                       "'some-long-template-hash-to-fill-pages-quickly')",
                       -1, &s, nullptr);
    for (int64_t i = 0;; ++i) {
      const std::string name = "killed-gpu-" + std::to_string(i) + std::string(64, 'z');
      sqlite3_bind_text(s, 1, name.c_str(), -1, SQLITE_TRANSIENT);
      if (sqlite3_step(s) != SQLITE_DONE) return 12;
      sqlite3_reset(s);
      if (i == 30000) {
        const char c = 'x';
        if (write(ready[1], &c, 1) != 1) return 13;
      }
    }
  });
  close(ready[1]);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1) << "child failed before its transaction was under way";
  close(ready[0]);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  kill(child, SIGKILL);
  EXPECT_EQ(wait_exit(child), 128 + SIGKILL);
  EXPECT_TRUE(fs::exists(dir / "t.db-wal"));
  EXPECT_GT(fs::file_size(dir / "t.db-wal"), 0u);  // uncommitted frames were written

  auto db = TuningDb::open_user(p);
  EXPECT_TRUE(db->verify().empty());
  EXPECT_EQ(db->stats().environments, environments_before);
  for (int k = 0; k < 5; ++k) EXPECT_EQ(db->find_exact(h200(), op_gat(), fp_hash(k))->schedule, sched(8));
  EXPECT_TRUE(db->put_result(make_run(h200(), op_gat(), 9, {cand(sched(32), 1)})));
  EXPECT_TRUE(db->verify().empty());
}

TEST(TuningDbRobustness, WriterKilledDuringPutsLosesNoCommittedRow) {
  TempDir dir;
  const fs::path p = dir / "t.db";
  TuningDb::open_user(p);
  const pid_t child = spawn([&] {
    auto db = TuningDb::open_user(p);
    for (int i = 0;; ++i)
      db->put_result(make_run(h200(), op_gat(), i % 7,
                              {cand(sched(32), 1 + i * 1e-3), cand(sched(16), 0.9), cand(sched(8), 0.8),
                               cand(sched(4), 1.2)}));
    return 0;
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (raw_int(p, "SELECT count(*) FROM runs") < 40 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  kill(child, SIGKILL);
  EXPECT_EQ(wait_exit(child), 128 + SIGKILL);
  auto db = TuningDb::open_user(p);
  const auto st = db->stats();
  EXPECT_GE(st.runs, 40);
  EXPECT_EQ(st.candidate_stats, 4 * st.runs);  // every committed run is complete
  EXPECT_EQ(st.results, 7);
  EXPECT_TRUE(db->verify().empty());
  for (int k = 0; k < 7; ++k) EXPECT_EQ(db->find_exact(h200(), op_gat(), fp_hash(k))->schedule, sched(8));
}

// Deterministic run number `i` of writer `w`: five overlapping problems, four candidates whose
// means depend on the writer, so the pooled winner depends on all runs.
TuningRun concurrent_run(int w, int i) {
  const int problem = i % 5;
  std::vector<CandidateStat> cs;
  const int lanes[4] = {4, 8, 16, 32};
  for (int s = 0; s < 4; ++s) {
    const double mean = 1.0 + 0.05 * ((s * 7 + problem * 3 + w * 5 + i) % 11);
    cs.push_back(cand(sched(lanes[s]), mean, 3 + (w + s) % 4, 0.02));
  }
  return make_run(h200(), op_gat(), problem, cs, "w" + std::to_string(w) + "-i" + std::to_string(i),
                  1000 + 100 * i + w, "host-" + std::to_string(w));
}

TEST(TuningDbConcurrency, ProcessesShareOneFile) {
  TempDir dir;
  const fs::path p = dir / "shared/tuning.db";  // not created yet: the writers race to create it
  constexpr int kWriters = 8, kRuns = 25;
  std::vector<pid_t> pids;
  for (int w = 0; w < kWriters; ++w)
    pids.push_back(spawn([&, w] {
      auto db = TuningDb::open_user(p, with_validator());
      for (int i = 0; i < kRuns; ++i) {
        auto r = db->put_result(concurrent_run(w, i));
        if (!r || subwarp_only(*r) != "") return 20;
        // Concurrent reads see only whole, valid rows.
        auto other = db->find_exact(h200(), op_gat(), fp_hash((i + 1) % 5));
        if (other && (subwarp_only(*other) != "" || other->runs < 1)) return 21;
        for (const TuningResult& c : db->candidates_for(h200(), op_gat()))
          if (subwarp_only(c) != "") return 22;
      }
      return 0;
    }));
  // A pure reader alongside: counts never go backwards, every row it sees is valid.
  pids.push_back(spawn([&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!fs::exists(p) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    auto db = TuningDb::open_user(p, with_validator());
    int64_t last = 0;
    while (last < kWriters * kRuns && std::chrono::steady_clock::now() < deadline) {
      int64_t runs = 0;
      for (const TuningResult& c : db->candidates_for(h200(), op_gat())) runs += c.runs;
      if (runs < last) return 30;
      last = runs;
    }
    return last == kWriters * kRuns ? 0 : 31;
  }));
  for (pid_t pid : pids) EXPECT_EQ(wait_exit(pid), 0);

  auto db = TuningDb::open_user(p, with_validator());
  const auto st = db->stats();
  EXPECT_EQ(st.runs, kWriters * kRuns);  // no lost rows
  EXPECT_EQ(st.candidate_stats, kWriters * kRuns * 4);
  EXPECT_EQ(st.results, 5);
  EXPECT_TRUE(db->verify().empty());
  // Same decisions as a single process writing the same runs in the opposite order.
  auto reference = TuningDb::open_user(dir / "reference.db", with_validator());
  for (int i = kRuns - 1; i >= 0; --i)
    for (int w = kWriters - 1; w >= 0; --w) reference->put_result(concurrent_run(w, i));
  EXPECT_EQ(snapshot(*db), snapshot(*reference));
  // Every process now dispatches identically.
  std::vector<std::string> decisions;
  for (int k = 0; k < 5; ++k) decisions.push_back(db->find_exact(h200(), op_gat(), fp_hash(k))->schedule);
  std::vector<pid_t> readers;
  for (int r = 0; r < 4; ++r)
    readers.push_back(spawn([&] {
      auto mine = TuningDb::open_user(p, with_validator());
      for (int k = 0; k < 5; ++k)
        if (mine->find_exact(h200(), op_gat(), fp_hash(k))->schedule != decisions[k]) return 40;
      return 0;
    }));
  for (pid_t pid : readers) EXPECT_EQ(wait_exit(pid), 0);
}

// The WAL index failing to grow (SQLITE_IOERR_SHMSIZE, no errno kept) happens when the disk is
// full; seen in the soak test as "disk I/O error (SQLite code 4874)".
TEST(TuningDbRobustness, WalIndexThatCannotGrowIsAFullDisk) {
  using dfgnn::db::ErrorKind;
  using dfgnn::db::detail::classify;
  EXPECT_EQ(classify(SQLITE_IOERR_SHMSIZE, 0), ErrorKind::DiskFull);
  EXPECT_EQ(classify(SQLITE_IOERR_WRITE, ENOSPC), ErrorKind::DiskFull);
  EXPECT_EQ(classify(SQLITE_IOERR_WRITE, EIO), ErrorKind::Io);
  EXPECT_EQ(classify(SQLITE_IOERR_SHMOPEN, 0), ErrorKind::Io);
}

// A full or read-only disk is reported as such, not as an unreadable database. Needs a private
// mount namespace with a small tmpfs (root, or an unprivileged user namespace); skipped without.
TEST(TuningDbRobustness, FullAndReadOnlyDisksAreNamed) {
  TempDir dir;
  const fs::path mnt = dir / "mnt";
  fs::create_directories(mnt);
  const pid_t child = spawn([&]() -> int {
    if (!enter_private_mounts()) return 77;
    if (mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=256k") != 0) return 77;
    const fs::path p = mnt / "user.db";
    auto db = TuningDb::open_user(p);
    db->put_result(make_run(h200(), op_gat(), 0, {cand(sched(32), 1)}));
    {  // fill the disk
      std::ofstream fill(mnt / "fill", std::ios::binary);
      const std::string block(4096, 'f');
      while (fill.write(block.data(), block.size())) {
      }
    }
    int failures = 0;
    auto check = [&](const char* what, const std::function<void()>& f, dfgnn::db::ErrorKind kind, const char* words) {
      try {
        f();
        std::fprintf(stderr, "%s: no error\n", what);
        ++failures;
      } catch (const dfgnn::db::DbError& e) {
        if (e.kind() != kind || !contains(e.what(), words) || contains(e.what(), "unreadable")) {
          std::fprintf(stderr, "%s: kind %s: %s\n", what, dfgnn::db::error_kind_name(e.kind()), e.what());
          ++failures;
        }
      }
    };
    check("put on a full disk", [&] {
      for (int k = 1; k < 200; ++k) db->put_result(make_run(h200(), op_gat(), k, {cand(sched(32), 1), cand(sched(8), 2)}));
    }, dfgnn::db::ErrorKind::DiskFull, "the disk is full");
    check("create on a full disk", [&] {
      auto fresh = TuningDb::open_user(mnt / "new.db");
      for (int k = 1; k < 200; ++k) fresh->put_result(make_run(h200(), op_gat(), k, {cand(sched(32), 1)}));
    }, dfgnn::db::ErrorKind::DiskFull, "the disk is full");
    db.reset();
    fs::remove(mnt / "fill");
    fs::remove(mnt / "new.db");
    fs::remove(mnt / "new.db-wal");
    fs::remove(mnt / "new.db-shm");
    if (mount(nullptr, mnt.c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr) != 0) return 78;
    check("open on a read-only disk", [&] {
      auto ro = TuningDb::open_user(p);
      ro->put_result(make_run(h200(), op_gat(), 300, {cand(sched(32), 1)}));
    }, dfgnn::db::ErrorKind::ReadOnly, "read-only");
    std::fflush(stderr);
    return failures;
  });
  const int code = wait_exit(child);
  if (code == 77) GTEST_SKIP() << "cannot mount a private tmpfs here (needs root or user namespaces)";
  EXPECT_EQ(code, 0) << "see the child's messages above";
}

}  // namespace
