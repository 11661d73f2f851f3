// dfgnn-db: inspects and maintains dfgnn's SQLite tuning databases: list / show / stats, export a
// consistent snapshot for site distribution, import (merge) databases tuned elsewhere, prune old
// results, verify integrity and every row. Uses the database classes of dfgnn_internal directly.
//
// Exit codes: 0 success, 1 failure (a database cannot be opened, is corrupt, or verify found
// problems), 2 bad arguments.
#include "cli_common.hpp"
#include "dispatch.hpp"
#include "error.hpp"
#include "tuning_db.hpp"

#include <dfgnn/dfgnn.h>

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace po = boost::program_options;
namespace fs = std::filesystem;
using namespace dfgnn::db;

namespace {

using cli::BadArgs;
using cli::Failure;
using cli::kExitFailure;

constexpr const char* kTool = "dfgnn-db";

const char* kUsage =
    "Usage: dfgnn-db [--db PATH] [--site PATH]... COMMAND [ARGS]\n\n"
    "Commands\n"
    "  list [--env CLASS]     one line per tuning result: id, environment class, op\n"
    "                         (model/dtype/H/D/pass/vector limit), fingerprint bucket, winner,\n"
    "                         median ms, default's median, speedup, runs, host, date; invalid\n"
    "                         rows are marked with the reason\n"
    "  show ID                everything about one result, with its pooled candidate statistics\n"
    "  stats                  counts of environments, fingerprints, results, runs, modules\n"
    "  export OUT.db          consistent, compacted snapshot of the database, to ship as a\n"
    "                         read-only site database (DFGNN_SITE_DB / dfgnnSetDatabase)\n"
    "  import|merge FILE...   pool the runs of other databases into this one (idempotent)\n"
    "  prune FILTERS          delete runs matching all given filters (at least one):\n"
    "                         --env CLASS, --older-than DAYS, --library-version V, --template-hash H\n"
    "  verify                 SQLite integrity check plus validation of every row; exit 1 on problems\n\n"
    "The database is --db PATH, by default $DFGNN_CACHE_DIR/tuning.db, else\n"
    "$XDG_CACHE_HOME/dfgnn/tuning.db, else ~/.cache/dfgnn/tuning.db. list, show, stats and verify\n"
    "open it read-only; --site PATH (repeatable) reads site databases instead (opened immutable),\n"
    "together with --db when that is given too.\n"
    "Exit codes: 0 ok, 1 failure (cannot open, corrupt, verify found problems), 2 bad arguments.\n\n"
    "Options";

// ---------------------------------------------------------------- formatting

std::string model_text(int32_t m) {
  const char* name = cli::find_model_name(m);
  return name != nullptr ? name : fmt::format("model{}", m);
}

std::string dtype_text(int32_t d) {
  const char* name = cli::find_dtype_name(d);
  return name != nullptr ? name : fmt::format("dtype{}", d);
}

std::string pass_text(int32_t p) {
  switch (p) {
    case 0: return "forward";
    case 1: return "bwd-row";
    case 2: return "bwd-col";
  }
  return fmt::format("pass{}", p);
}

std::string op_text(const OpKey& op) {
  return fmt::format("{}/{}/H{}/D{}/{}/vec{}{}", model_text(op.model), dtype_text(op.dtype), op.heads, op.dim,
                     pass_text(op.direction), op.variant % dfgnn::kEdgeVariant,
                     op.variant >= dfgnn::kEdgeVariant ? "/edge" : "");
}

std::string ms(double x) { return std::isfinite(x) && x > 0 ? fmt::format("{:.4f}", x) : "-"; }

std::string speedup(const TuningResult& r) {
  const double s = r.default_median_ms / r.stats.median_ms;
  return std::isfinite(s) && s > 0 && !r.schedule.empty() ? fmt::format("{:.2f}x", s) : "-";
}

std::string date_text(int64_t unix_time) {
  if (unix_time <= 0) return "-";
  const std::time_t t = static_cast<std::time_t>(unix_time);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", &tm);
  return buf;
}

// Prints rows as left-aligned columns separated by two spaces (the last column unpadded).
void print_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) {
      if (width.size() <= c) width.push_back(0);
      width[c] = std::max(width[c], row[c].size());
    }
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(width[c] - row[c].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    fmt::print("{}\n", line);
  }
}

// ---------------------------------------------------------------- opening

TuningDb::Options db_options() {
  TuningDb::Options options;
  options.validator = dfgnn::row_problem;  // the runtime's own check of a row against its problem
  return options;
}

void require_file(const fs::path& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) throw Failure{fmt::format("cannot open {}: no such file", path.string())};
  if (fs::is_directory(st)) throw Failure{fmt::format("cannot open {}: it is a directory", path.string())};
}

struct Target {
  std::unique_ptr<TuningDb> db;
  std::string label;  // "user" or "site"
};

// The databases a read command works on: the sites given with --site, plus --db when given (or,
// without --site, the user database).
std::vector<Target> open_for_reading(const std::optional<fs::path>& user, const std::vector<fs::path>& sites) {
  std::vector<Target> out;
  if (user) {
    require_file(*user);
    out.push_back({TuningDb::open_read_only(*user, db_options()), "user"});
  }
  for (const fs::path& s : sites) {
    require_file(s);
    out.push_back({TuningDb::open_site(s, db_options()), "site"});
  }
  return out;
}

// ---------------------------------------------------------------- commands

int cmd_list(std::vector<Target>& targets, const std::optional<std::string>& env) {
  size_t total = 0, invalid = 0;
  for (Target& t : targets) {
    const std::vector<ListedResult> rows = t.db->list(env);
    if (targets.size() > 1) fmt::print("== {} ({})\n", t.db->path().string(), t.label);
    std::vector<std::vector<std::string>> table;
    table.push_back({"ID", "ENV CLASS", "OP", "BUCKET", "WINNER", "MEDIAN MS", "DEFAULT MS", "SPEEDUP", "RUNS", "HOST",
                     "DATE (UTC)", ""});
    for (const ListedResult& l : rows) {
      const TuningResult& r = l.result;
      std::vector<std::string> row{std::to_string(r.id),
                                   r.env_class,
                                   op_text(r.op),
                                   r.bucket_key.empty() ? "-" : r.bucket_key,
                                   r.schedule.empty() ? "(none)" : r.schedule,
                                   ms(r.stats.median_ms),
                                   ms(r.default_median_ms),
                                   speedup(r),
                                   std::to_string(r.runs),
                                   r.host.empty() ? "-" : r.host,
                                   date_text(r.unix_time),
                                   l.problem.empty() ? "" : "INVALID: " + l.problem};
      table.push_back(std::move(row));
      ++total;
      if (!l.problem.empty()) ++invalid;
    }
    if (rows.empty()) {
      fmt::print("no results in {}{}\n", t.db->path().string(), env ? " for environment class " + *env : "");
    } else {
      print_table(table);
    }
  }
  fmt::print("{} result(s){}\n", total, invalid ? fmt::format(", {} invalid (never used by dispatch)", invalid) : "");
  return 0;
}

int cmd_show(std::vector<Target>& targets, const std::string& id_text) {
  int64_t id = 0;
  try {
    size_t used = 0;
    id = std::stoll(id_text, &used);
    if (used != id_text.size() || id < 1) throw std::invalid_argument("id");
  } catch (const std::exception&) {
    throw BadArgs{fmt::format("show: '{}' is not a result id (a positive integer; see the ID column of list)", id_text)};
  }
  bool found = false;
  for (Target& t : targets) {
    for (const ListedResult& l : t.db->list()) {
      const TuningResult& r = l.result;
      if (r.id != id) continue;
      found = true;
      const EnvironmentInfo& e = r.environment;
      fmt::print("result {} in {} ({})\n", r.id, t.db->path().string(), t.label);
      fmt::print("  valid            {}\n", l.problem.empty() ? "yes" : "NO: " + l.problem);
      fmt::print("  environment      {}\n", r.env_class);
      fmt::print("    gpu            {} (sm_{}, {} SMs), driver {}, nvrtc {}\n", e.gpu_name, e.compute_capability,
                 e.sm_count, e.driver_version, e.nvrtc_version);
      fmt::print("  build stamp      library {}, template hash {}\n", r.library_version, r.template_hash);
      fmt::print("  op               {} (model {}, dtype {}, heads {}, dim {}, pass {}, vector limit {}, edge features {})\n",
                 op_text(r.op), model_text(r.op.model), dtype_text(r.op.dtype), r.op.heads, r.op.dim,
                 pass_text(r.op.direction), r.op.variant % dfgnn::kEdgeVariant,
                 r.op.variant >= dfgnn::kEdgeVariant ? "yes" : "no");
      const dfgnn_fingerprint_t& fp = r.fingerprint;
      fmt::print("  fingerprint      {} (bucket {})\n", r.fingerprint_hash, r.bucket_key.empty() ? "-" : r.bucket_key);
      fmt::print("    graph          {} nodes, {} edges, mean in-degree {:.2f}, max {}, p50 {} p90 {} p99 {} p99.9 {}, "
                 "cv {:.3f}, gini {:.3f}\n",
                 fp.num_nodes, fp.num_edges, fp.mean_degree, fp.max_degree, fp.p50, fp.p90, fp.p99, fp.p999, fp.cv,
                 fp.gini);
      fmt::print("  winner           {} (solver {})\n", r.schedule.empty() ? "(none)" : r.schedule, r.solver_id);
      fmt::print("    stats          median {} ms, mean {} ms, sd {}, min {} ms, {} samples\n", ms(r.stats.median_ms),
                 ms(r.stats.mean_ms), r.stats.variance >= 0 ? fmt::format("{:.4g}", std::sqrt(r.stats.variance)) : "-",
                 ms(r.stats.min_ms), r.stats.count);
      fmt::print("  default          {}  median {} ms  (winner is {} faster)\n",
                 r.default_schedule.empty() ? "-" : r.default_schedule, ms(r.default_median_ms), speedup(r));
      fmt::print("  runner-up        {}  median {} ms\n", r.runner_up_schedule.empty() ? "-" : r.runner_up_schedule,
                 ms(r.runner_up_median_ms));
      fmt::print("  runs             {} pooled; most recent on {} at {} UTC by {}\n", r.runs,
                 r.host.empty() ? "-" : r.host, date_text(r.unix_time), r.tool_version.empty() ? "-" : r.tool_version);
      const std::vector<CandidateStat> cands = t.db->pooled_candidates(r.id);
      fmt::print("  pooled candidates ({}), best mean first:\n", cands.size());
      std::vector<std::vector<std::string>> table;
      table.push_back({"   ", "SCHEDULE", "SOLVER", "COUNT", "MEAN MS", "SD MS", "MIN MS", "MEDIAN MS", "VS WINNER"});
      const double best = r.stats.mean_ms;
      for (const CandidateStat& c : cands) {
        const double ratio = c.mean_ms / best;
        std::string mark = c.schedule == r.schedule ? "  *" : c.schedule == r.default_schedule ? "  d" : "   ";
        table.push_back({mark, c.schedule, std::to_string(c.solver_id), std::to_string(c.count), ms(c.mean_ms),
                         fmt::format("{:.4g}", std::sqrt(c.variance())), ms(c.min_ms), ms(c.median_ms),
                         std::isfinite(ratio) && ratio > 0 ? fmt::format("{:.3f}x", ratio) : "-"});
      }
      print_table(table);
      fmt::print("  (* winner, d default; mean and sd pooled over runs, median from the most recent run)\n");
    }
  }
  if (!found) {
    std::string where;
    for (const Target& t : targets) where += (where.empty() ? "" : ", ") + t.db->path().string();
    throw Failure{fmt::format("no result with id {} in {}", id, where)};
  }
  return 0;
}

int cmd_stats(std::vector<Target>& targets) {
  for (Target& t : targets) {
    const DbStats s = t.db->stats();
    std::error_code ec;
    const auto size = fs::file_size(t.db->path(), ec);
    fmt::print("{} ({}{})\n", s.path, t.label, s.read_only ? ", read-only" : "");
    fmt::print("  schema version      {}\n", s.schema_version);
    fmt::print("  file size           {} bytes\n", ec ? std::string("?") : std::to_string(size));
    fmt::print("  environments        {}\n", s.environments);
    fmt::print("  fingerprints        {}\n", s.fingerprints);
    fmt::print("  results             {} ({} without a winner)\n", s.results, s.results_without_winner);
    fmt::print("  runs                {}\n", s.runs);
    fmt::print("  candidate stats     {}\n", s.candidate_stats);
    fmt::print("  modules             {} ({} bytes)\n", s.modules, s.module_bytes);
  }
  return 0;
}

int cmd_export(const fs::path& user, const std::string& out) {
  require_file(user);
  std::error_code ec;
  if (fs::is_directory(out, ec)) throw BadArgs{fmt::format("export: {} is a directory", out)};
  if (fs::equivalent(user, out, ec)) throw BadArgs{fmt::format("export: {} is the database itself", out)};
  auto db = TuningDb::open_read_only(user, db_options());
  db->export_to(out);
  auto copy = TuningDb::open_site(out, db_options());
  const DbStats s = copy->stats();
  fmt::print("exported {} -> {}: {} result(s), {} run(s), {} module(s), {} bytes\n", user.string(), out, s.results, s.runs,
             s.modules, fs::file_size(out, ec));
  fmt::print("ship it read-only: DFGNN_SITE_DB={} (or dfgnnSetDatabase(ctx, NULL, \"{}\"))\n", out, out);
  return 0;
}

// Every source is opened (read-only) before anything is written, so a typo or a corrupt file
// merges nothing and creates no database.
int cmd_merge(const fs::path& user, const std::vector<std::string>& files) {
  std::error_code ec;
  for (const std::string& f : files) {
    require_file(f);
    if (fs::equivalent(user, f, ec)) throw BadArgs{fmt::format("{}: {} is the database itself", "merge", f)};
    TuningDb::open_read_only(f, TuningDb::Options());  // throws DATABASE_ERROR naming the file
  }
  const bool existed = fs::exists(user, ec);
  auto db = TuningDb::open_user(user, db_options());
  if (!existed) fmt::print("created {}\n", user.string());
  int failed = 0;
  for (const std::string& f : files) {
    try {
      const MergeReport r = db->merge_from(f);
      fmt::print("merged {} -> {}: {} run(s) added, {} already present, {} rejected, {} candidate row(s) rejected, "
                 "{} result(s) updated, {} module(s) added\n",
                 f, user.string(), r.runs_added, r.runs_present, r.runs_rejected, r.candidates_rejected,
                 r.results_updated, r.modules_added);
    } catch (const dfgnn::Error& e) {
      fmt::print(stderr, "{}: merge {}: {}: {}\n", kTool, f, dfgnnGetStatusString(e.status()), e.what());
      ++failed;
    }
  }
  return failed ? kExitFailure : 0;
}

int cmd_prune(const fs::path& user, const PruneFilter& filter) {
  require_file(user);
  auto db = TuningDb::open_user(user, db_options());
  const PruneReport r = db->prune(filter);
  fmt::print("pruned {}: {} run(s), {} result(s), {} module(s) deleted\n", user.string(), r.runs, r.results, r.modules);
  return 0;
}

int cmd_verify(std::vector<Target>& targets) {
  size_t problems = 0;
  for (Target& t : targets) {
    const std::vector<std::string> found = t.db->verify(dfgnn::row_problem);
    const DbStats s = t.db->stats();
    if (found.empty()) {
      fmt::print("verify {}: OK (integrity, foreign keys, {} result(s), {} run(s), {} candidate stat(s), {} module(s))\n",
                 t.db->path().string(), s.results, s.runs, s.candidate_stats, s.modules);
    } else {
      fmt::print("verify {}: {} problem(s):\n", t.db->path().string(), found.size());
      for (const std::string& p : found) fmt::print("  {}\n", p);
    }
    problems += found.size();
  }
  return problems ? kExitFailure : 0;
}

// ---------------------------------------------------------------- main

int run(int argc, char** argv) {
  po::options_description visible(kUsage);
  std::string db_arg, env, library_version, template_hash;
  std::vector<std::string> site_args;
  double older_than_days = 0;
  visible.add_options()
    ("help,h", "show this help")
    ("version", "print the version")
    ("db", po::value(&db_arg), "the (user) database to work on")
    ("site", po::value(&site_args)->composing(), "a read-only site database for list, show, stats, verify (repeatable)")
    ("env", po::value(&env), "list, prune: only this environment class, e.g. 'NVIDIA H200|sm_90|132'")
    ("older-than", po::value(&older_than_days), "prune: runs measured more than DAYS days ago")
    ("library-version", po::value(&library_version), "prune: runs of results with this library version")
    ("template-hash", po::value(&template_hash), "prune: runs of results (and modules) with this kernel template hash")
    ("verbose,v", "log the library's warnings (rows rejected while reading or merging)");
  po::options_description all;
  std::vector<std::string> words;
  all.add(visible).add_options()("words", po::value(&words)->composing());
  po::positional_options_description positional;
  positional.add("words", -1);
  po::variables_map vm;
  cli::parse_options([&] {
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), vm);
    po::notify(vm);
  });
  if (cli::print_help_or_version(kTool, vm.count("help") > 0, vm.count("version") > 0, visible)) return 0;
  // The library logs rejected rows on its "dfgnn" logger; the commands report them themselves.
  if (std::getenv("DFGNN_LOG_LEVEL") == nullptr && spdlog::get("dfgnn") == nullptr) {
    auto logger = spdlog::stderr_color_mt("dfgnn");
    logger->set_level(vm.count("verbose") ? spdlog::level::info : spdlog::level::err);
  }
  if (words.empty()) throw BadArgs{"no command given: list, show, stats, export, import, merge, prune or verify (see --help)"};
  const std::string command = words[0];
  const std::vector<std::string> args(words.begin() + 1, words.end());
  const bool reading = command == "list" || command == "show" || command == "stats" || command == "verify";
  const bool known = reading || command == "export" || command == "import" || command == "merge" || command == "prune";
  if (!known)
    throw BadArgs{fmt::format("unknown command '{}': use list, show, stats, export, import, merge, prune or verify",
                              command)};
  auto expect_args = [&](size_t n, const char* what) {
    if (args.size() != n)
      throw BadArgs{fmt::format("{} takes {} (got {} argument(s); see --help)", command, what, args.size())};
  };
  auto only_for = [&](const char* option, std::initializer_list<const char*> commands) {
    if (!vm.count(option)) return;
    for (const char* c : commands)
      if (command == c) return;
    throw BadArgs{fmt::format("--{} does not apply to {}", option, command)};
  };
  only_for("env", {"list", "prune"});
  only_for("older-than", {"prune"});
  only_for("library-version", {"prune"});
  only_for("template-hash", {"prune"});
  if (!site_args.empty() && !reading)
    throw BadArgs{fmt::format("--site is for list, show, stats and verify (site databases are read-only), not {}", command)};
  if (vm.count("db") && db_arg.empty()) throw BadArgs{"--db needs a file name"};
  if (vm.count("env") && env.empty()) throw BadArgs{"--env needs an environment class"};

  // The user database: --db, else the default location (not for reads that name --site only).
  std::optional<fs::path> user;
  if (vm.count("db")) {
    user = db_arg;
  } else if (site_args.empty() || !reading) {
    const fs::path d = LayeredDb::default_user_path();
    if (d.empty())
      throw BadArgs{"no database: give --db PATH (none of DFGNN_CACHE_DIR, XDG_CACHE_HOME, HOME is set)"};
    user = d;
  }
  std::vector<fs::path> sites(site_args.begin(), site_args.end());

  if (command == "list") {
    expect_args(0, "no arguments");
    auto targets = open_for_reading(user, sites);
    return cmd_list(targets, vm.count("env") ? std::optional<std::string>(env) : std::nullopt);
  }
  if (command == "show") {
    expect_args(1, "one result ID");
    auto targets = open_for_reading(user, sites);
    return cmd_show(targets, args[0]);
  }
  if (command == "stats") {
    expect_args(0, "no arguments");
    auto targets = open_for_reading(user, sites);
    return cmd_stats(targets);
  }
  if (command == "verify") {
    expect_args(0, "no arguments");
    auto targets = open_for_reading(user, sites);
    return cmd_verify(targets);
  }
  if (command == "export") {
    expect_args(1, "one output file (export OUT.db)");
    if (args[0].empty()) throw BadArgs{"export: empty output file name"};
    return cmd_export(*user, args[0]);
  }
  if (command == "import" || command == "merge") {
    if (args.empty()) throw BadArgs{fmt::format("{} takes one or more database files", command)};
    return cmd_merge(*user, args);
  }
  // prune
  expect_args(0, "filters only (--env, --older-than, --library-version, --template-hash)");
  PruneFilter filter;
  if (vm.count("env")) filter.env_class = env;
  if (vm.count("older-than")) {
    if (!(older_than_days >= 0) || !std::isfinite(older_than_days))
      throw BadArgs{fmt::format("--older-than {} must be a number of days >= 0", older_than_days)};
    filter.older_than = static_cast<int64_t>(std::time(nullptr)) - static_cast<int64_t>(std::llround(older_than_days * 86400.0));
  }
  if (vm.count("library-version")) {
    if (library_version.empty()) throw BadArgs{"--library-version needs a version"};
    filter.library_version = library_version;
  }
  if (vm.count("template-hash")) {
    if (template_hash.empty()) throw BadArgs{"--template-hash needs a hash"};
    filter.template_hash = template_hash;
  }
  if (!filter.env_class && !filter.older_than && !filter.library_version && !filter.template_hash)
    throw BadArgs{"prune refuses to run without a filter: give --env, --older-than, --library-version and/or "
                  "--template-hash"};
  return cmd_prune(*user, filter);
}

}  // namespace

int main(int argc, char** argv) {
  return cli::run_main(kTool, [&] {
    try {
      return run(argc, argv);
    } catch (const dfgnn::Error& e) {  // the library's errors name their status
      fmt::print(stderr, "{}: {}: {}\n", kTool, dfgnnGetStatusString(e.status()), e.what());
      return kExitFailure;
    }
  });
}
