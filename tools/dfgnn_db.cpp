// dfgnn-db: inspects and maintains dfgnn's SQLite tuning databases: list / show / stats, export a
// consistent snapshot for site distribution, import (merge) databases tuned elsewhere, prune old
// results, verify integrity and every row, re-stamp results after a kernel change that left their
// machine code as it was. Uses the database classes of dfgnn_internal directly.
//
// Exit codes: 0 success, 1 failure (a database cannot be opened, is corrupt, or verify found
// problems), 2 bad arguments.
#include "api_guard.hpp"
#include "cli_common.hpp"
#include "context.hpp"
#include "cubin_elf.hpp"
#include "dispatch.hpp"
#include "fingerprint.hpp"
#include "kernel_names.hpp"
#include "nvrtc.hpp"
#include "printable.hpp"
#include "error.hpp"
#include "tuning_db.hpp"

#include <dfgnn/dfgnn.h>

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <map>
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

// Every line the tool prints goes through say / say_err: database text (hosts, schedules, GPU
// names, and messages quoting rows) may hold control characters, shown escaped (cli::printable).
template <typename... Args>
void say(fmt::format_string<Args...> format, Args&&... args) {
  std::fputs((cli::printable(fmt::format(format, std::forward<Args>(args)...)) + "\n").c_str(), stdout);
}
template <typename... Args>
void say_err(fmt::format_string<Args...> format, Args&&... args) {
  std::fflush(stdout);
  std::fputs((cli::printable(fmt::format(format, std::forward<Args>(args)...)) + "\n").c_str(), stderr);
}

// The commands: their synopsis, what they do (pre-wrapped for the help's second column) and
// the options that apply to them besides --db, --help, --version and --verbose.
struct Command {
  const char* name;
  const char* synopsis;
  const char* about;
  std::vector<const char*> options;
  bool reads;  // opens read-only; may read --site databases
};

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {"list", "list [--env CLASS]",
       "one line per tuning result: id, environment class, op\n"
       "(model/dtype/H/D/pass/vector limit), fingerprint bucket, winner,\n"
       "median ms, default's median, speedup, runs, host, date; invalid\n"
       "rows are marked with the reason",
       {"site", "shipped", "env"}, true},
      {"show", "show ID", "everything about one result, with its pooled candidate statistics", {"site", "shipped"},
       true},
      {"stats", "stats", "counts of environments, fingerprints, results, runs, modules", {"site", "shipped"}, true},
      {"export", "export OUT.db",
       "consistent, compacted snapshot of the database, to ship as a\n"
       "read-only site database (DFGNN_SITE_DB / dfgnnSetDatabase)",
       {}, false},
      {"import", "import FILE...", "the same as merge", {}, false},
      {"merge", "merge FILE...",
       "pool the runs of other databases into this one (idempotent; each\n"
       "file all or nothing; an empty file merges nothing)",
       {}, false},
      {"prune", "prune FILTERS",
       "delete runs matching all given filters (at least one):\n"
       "--env CLASS, --older-than DAYS, --library-version V, --template-hash H",
       {"env", "older-than", "library-version", "template-hash"}, false},
      {"restamp", "restamp OLD_MODULES.db NEW_MODULES.db",
       "stamp the results tuned with OLD_MODULES' kernel source as tuned\n"
       "with this build's, once NEW_MODULES (compiled by this build) holds\n"
       "each of OLD_MODULES' modules without dropout with the same machine\n"
       "code; else exit 1 and change nothing",
       {}, false},
      {"verify", "verify",
       "SQLite integrity check, the schema's objects, and validation of\n"
       "every row as dispatch would use it; exit 1 on problems",
       {"site", "shipped"}, true},
      {"layers", "layers",
       "the layers dispatch reads, in order: user, site ($DFGNN_SITE_DB or\n"
       "--site), shipped (installed with the library, or $DFGNN_SHIPPED_DB);\n"
       "per layer its status, results and what it was tuned for; exit 1 if\n"
       "a layer cannot be read",
       {"site"}, true},
  };
  return table;
}

const Command* find_command(const std::string& name) {
  for (const Command& c : commands())
    if (name == c.name) return &c;
  return nullptr;
}

std::string command_names() {
  std::string out;
  for (const Command& c : commands()) out += (out.empty() ? "" : ", ") + std::string(c.name);
  return out;
}

// Text indented to start at column `indent` on every line after the first.
std::string hanging(const std::string& text, size_t indent) {
  std::string out;
  for (char ch : text) {
    out += ch;
    if (ch == '\n') out += std::string(indent, ' ');
  }
  return out;
}

std::string usage() {
  std::string out = "Usage: dfgnn-db [--db PATH] [--site PATH]... COMMAND [ARGS]\n"
                    "       dfgnn-db COMMAND --help   (that command's help)\n\nCommands\n";
  constexpr size_t kColumn = 25;
  for (const Command& c : commands()) {
    std::string line = std::string("  ") + c.synopsis;
    line += line.size() + 1 < kColumn ? std::string(kColumn - line.size(), ' ') : std::string(" ");
    out += line + hanging(c.about, kColumn) + "\n";
  }
  out += "\nThe database is --db PATH, by default $DFGNN_CACHE_DIR/tuning.db, else\n"
         "$XDG_CACHE_HOME/dfgnn/tuning.db, else ~/.cache/dfgnn/tuning.db. list, show, stats and verify\n"
         "open it read-only; --site PATH (repeatable) reads site databases instead (opened immutable),\n"
         "together with --db when that is given too; --shipped reads the shipped databases (the\n"
         "package's own: <prefix>/share/dfgnn/tuning/*.db or dfgnn/data/tuning/*.db, or $DFGNN_SHIPPED_DB).\n"
         "Exit codes: 0 ok, 1 failure (cannot open, corrupt, verify found problems), 2 bad arguments.\n\nOptions";
  return out;
}

// The options every command takes.
constexpr const char* kCommonOptions[] = {"db", "help", "version", "verbose"};

bool applies(const Command& c, const std::string& option) {
  for (const char* o : kCommonOptions)
    if (option == o) return true;
  for (const char* o : c.options)
    if (option == o) return true;
  return false;
}

// "Usage: dfgnn-db [--db PATH] ... SYNOPSIS", what it does, and only its options.
void print_command_help(const Command& c, const po::options_description& all_options) {
  po::options_description mine(fmt::format("Usage: dfgnn-db [--db PATH]{} {}\n\n{}\n\nOptions",
                                           applies(c, "site") ? " [--site PATH]..." : "", c.synopsis, c.about));
  for (const auto& option : all_options.options())
    if (applies(c, option->long_name())) mine.add(option);
  std::cout << mine << "\n";
}

// ---------------------------------------------------------------- formatting

// "STATUS: message" for the library's errors (the database's DbError, the runtime's dfgnn::Error),
// else the message.
std::string describe(const std::exception& e) {
  if (const auto* d = dynamic_cast<const DbError*>(&e)) return fmt::format("{}: {}", dfgnnGetStatusString(dfgnn::db_status(*d)), e.what());
  if (const auto* r = dynamic_cast<const dfgnn::Error*>(&e))
    return fmt::format("{}: {}", dfgnnGetStatusString(r->status()), e.what());
  return e.what();
}

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
  const dfgnn::KeyBits bits = dfgnn::unpack_key_bits(op.key_bits);
  return fmt::format("{}/{}/H{}/D{}/{}/vec{}{}", model_text(op.model), dtype_text(op.dtype), op.heads, op.dim,
                     pass_text(op.direction), bits.max_vec, bits.edge_features ? "/edge" : "");
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

// Prints rows as left-aligned columns separated by two spaces (the last column unpadded). Cells
// are escaped before they are measured, so a hostile cell cannot break the alignment either.
void print_table(std::vector<std::vector<std::string>> rows) {
  std::vector<size_t> width;
  for (auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) {
      row[c] = cli::printable(row[c]);
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
    say("{}", line);
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

// One database's failure, for a command that reports it and goes on to the next database:
// "DAMAGED: " first when SQLite found damaged pages.
std::string failure_text(const std::exception& e) {
  const auto* d = dynamic_cast<const DbError*>(&e);
  return (d != nullptr && d->kind() == ErrorKind::Corrupt ? "DAMAGED: " : "") + describe(e);
}

struct Target {
  fs::path path;
  std::unique_ptr<TuningDb> db;  // null when it could not be opened (see error)
  std::string label;             // "user", "site" or "shipped"
  std::string error;             // why it could not be opened (failure_text)
};

// The databases a read command works on: the sites given with --site and the shipped databases
// with --shipped, plus --db when given (or, without either, the user database). A missing file
// throws; one that fails to open is returned with its error (the commands report it and go on).
std::vector<Target> open_for_reading(const std::optional<fs::path>& user, const std::vector<fs::path>& sites,
                                     const std::vector<fs::path>& shipped) {
  std::vector<Target> out;
  auto add = [&](const fs::path& path, const char* label) {
    require_file(path);
    Target t{path, nullptr, label, {}};
    try {
      t.db = t.label == "user" ? TuningDb::open_read_only(path, db_options()) : TuningDb::open_site(path, db_options());
    } catch (const std::exception& e) {
      t.error = failure_text(e);
    }
    out.push_back(std::move(t));
  };
  if (user) add(*user, "user");
  for (const fs::path& s : sites) add(s, "site");
  for (const fs::path& s : shipped) add(s, "shipped");
  return out;
}

// Where the shipped databases come from, for humans.
std::string shipped_origin() {
  if (const char* v = std::getenv("DFGNN_SHIPPED_DB"); v != nullptr) return fmt::format("DFGNN_SHIPPED_DB='{}'", v);
  const fs::path dir = LayeredDb::shipped_directory();
  return dir.empty() ? "none installed beside the library" : "installed in " + dir.string();
}

// ---------------------------------------------------------------- commands

// A database's rows for list and show, or nullopt after reporting why they cannot be read (a file
// that failed to open, damaged pages): those commands go on to the next database and exit 1.
std::optional<std::vector<ListedResult>> rows_or_report(const char* command, Target& t,
                                                        const std::optional<std::string>& env = std::nullopt) {
  std::string error = t.error;
  if (t.db != nullptr) try {
      return t.db->list(env);
    } catch (const std::exception& e) {
      error = failure_text(e);
    }
  say_err("{}: {} {}: {}", kTool, command, t.path.string(), error);
  return std::nullopt;
}

int cmd_list(std::vector<Target>& targets, const std::optional<std::string>& env) {
  size_t total = 0, invalid = 0;
  int failed = 0;
  for (Target& t : targets) {
    const std::optional<std::vector<ListedResult>> listed = rows_or_report("list", t, env);
    if (!listed) {
      ++failed;
      continue;
    }
    const std::vector<ListedResult>& rows = *listed;
    if (targets.size() > 1) say("== {} ({})", t.db->path().string(), t.label);
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
      say("no results in {}{}", t.db->path().string(), env ? " for environment class " + *env : "");
    } else {
      print_table(table);
    }
  }
  say("{} result(s){}{}", total, invalid ? fmt::format(", {} invalid (never used by dispatch)", invalid) : "",
      failed ? fmt::format("; {} database(s) could not be read", failed) : "");
  return failed ? kExitFailure : 0;
}

int cmd_show(std::vector<Target>& targets, const std::string& id_text) {
  // Digits only, as node ids are: stoll alone takes " 42" and "+42".
  int64_t id = 0;
  const auto [end, ec] = std::from_chars(id_text.data(), id_text.data() + id_text.size(), id);
  const bool digits = !id_text.empty() && std::all_of(id_text.begin(), id_text.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits || ec != std::errc() || end != id_text.data() + id_text.size() || id < 1)
    throw BadArgs{fmt::format("show: '{}' is not a result id (digits only, at least 1; see the ID column of list)",
                              id_text)};
  bool found = false;
  int failed = 0;
  for (Target& t : targets) {
    const std::optional<std::vector<ListedResult>> listed = rows_or_report("show", t);
    if (!listed) {
      ++failed;
      continue;
    }
    for (const ListedResult& l : *listed) {
      const TuningResult& r = l.result;
      if (r.id != id) continue;
      found = true;
      const EnvironmentInfo& e = r.environment;
      say("result {} in {} ({})", r.id, t.db->path().string(), t.label);
      say("  valid            {}", l.problem.empty() ? "yes" : "NO: " + l.problem);
      say("  environment      {}", r.env_class);
      say("    gpu            {} (sm_{}, {} SMs), driver {}, nvrtc {}", e.gpu_name, e.compute_capability,
                 e.sm_count, e.driver_version, e.nvrtc_version);
      say("  build stamp      library {}, template hash {}", r.library_version, r.template_hash);
      say("  op               {} (model {}, dtype {}, heads {}, dim {}, pass {}, vector limit {}, edge features {})",
                 op_text(r.op), model_text(r.op.model), dtype_text(r.op.dtype), r.op.heads, r.op.dim,
                 pass_text(r.op.direction), dfgnn::unpack_key_bits(r.op.key_bits).max_vec,
                 dfgnn::unpack_key_bits(r.op.key_bits).edge_features ? "yes" : "no");
      say("  fingerprint      {} (bucket {})", r.fingerprint_hash, r.bucket_key.empty() ? "-" : r.bucket_key);
      try {
        const dfgnn_fingerprint_t fp = dfgnn::parse_fingerprint(r.fingerprint_text);
        say("    graph          {} nodes, {} edges, mean in-degree {:.2f}, max {}, p50 {} p90 {} p99 {} p99.9 {}, "
                   "cv {:.3f}, gini {:.3f}",
                   fp.num_nodes, fp.num_edges, fp.mean_degree, fp.max_degree, fp.p50, fp.p90, fp.p99, fp.p999, fp.cv,
                   fp.gini);
      } catch (const std::exception& e) {
        say("    graph          (its fingerprint text does not parse: {})", e.what());
      }
      say("  winner           {} (solver {})", r.schedule.empty() ? "(none)" : r.schedule, r.solver_id);
      say("    stats          median {} ms, mean {} ms, sd {}, min {} ms, {} samples", ms(r.stats.median_ms),
                 ms(r.stats.mean_ms), r.stats.variance >= 0 ? fmt::format("{:.4g}", std::sqrt(r.stats.variance)) : "-",
                 ms(r.stats.min_ms), r.stats.count);
      say("  default          {}  median {} ms  (winner is {} faster)",
                 r.default_schedule.empty() ? "-" : r.default_schedule, ms(r.default_median_ms), speedup(r));
      say("  runner-up        {}  median {} ms", r.runner_up_schedule.empty() ? "-" : r.runner_up_schedule,
                 ms(r.runner_up_median_ms));
      say("  runs             {} pooled; most recent on {} at {} UTC by {}", r.runs,
                 r.host.empty() ? "-" : r.host, date_text(r.unix_time), r.tool_version.empty() ? "-" : r.tool_version);
      std::vector<CandidateStat> cands;
      try {
        cands = t.db->pooled_candidates(r.id);
      } catch (const std::exception& e) {  // damaged candidate pages: the result's own row was shown
        say_err("{}: show {}: pooled candidates of result {}: {}", kTool, t.path.string(), r.id, failure_text(e));
        ++failed;
        continue;
      }
      say("  pooled candidates ({}), best mean first:", cands.size());
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
      say("  (* winner, d default; mean and sd pooled over runs, median from the most recent run)");
    }
  }
  if (!found) {
    std::string where;
    for (const Target& t : targets) where += (where.empty() ? "" : ", ") + t.path.string();
    throw Failure{fmt::format("no result with id {} in {}{}", id, where,
                              failed ? fmt::format("; {} database(s) could not be read", failed) : "")};
  }
  return failed ? kExitFailure : 0;
}

int cmd_stats(std::vector<Target>& targets) {
  int failed = 0;
  for (Target& t : targets) {
    DbStats s;
    std::string error = t.error;
    if (t.db != nullptr) try {
        s = t.db->stats();
      } catch (const std::exception& e) {
        error = failure_text(e);
      }
    if (!error.empty()) {
      say_err("{}: stats {}: {}", kTool, t.path.string(), error);
      ++failed;
      continue;
    }
    std::error_code ec;
    const auto size = fs::file_size(t.db->path(), ec);
    say("{} ({}{})", s.path, t.label, s.read_only ? ", read-only" : "");
    say("  schema version      {}", s.schema_version);
    say("  file size           {} bytes", ec ? std::string("?") : std::to_string(size));
    say("  environments        {}", s.environments);
    say("  fingerprints        {}", s.fingerprints);
    say("  results             {} ({} without a winner)", s.results, s.results_without_winner);
    say("  runs                {}", s.runs);
    say("  candidate stats     {}", s.candidate_stats);
    say("  modules             {} ({} bytes)", s.modules, s.module_bytes);
  }
  return failed ? kExitFailure : 0;
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
  say("exported {} -> {}: {} result(s), {} run(s), {} module(s), {} bytes", user.string(), out, s.results, s.runs,
             s.modules, fs::file_size(out, ec));
  say("ship it read-only: DFGNN_SITE_DB={} (or dfgnnSetDatabase(ctx, NULL, \"{}\"))", out, out);
  return 0;
}

// Every source is opened (read-only) before anything is written, so a typo or a corrupt file
// merges nothing and creates no database.
int cmd_merge(const fs::path& user, const std::vector<std::string>& files) {
  std::error_code ec;
  for (const std::string& f : files) {
    require_file(f);
    if (fs::equivalent(user, f, ec)) throw BadArgs{fmt::format("{}: {} is the database itself", "merge", f)};
    if (const std::string suffix = own_sidecar(user, f); !suffix.empty())
      throw BadArgs{fmt::format("merge: {} is this database's {} file, not a database to merge", f, suffix)};
    TuningDb::open_merge_source(f, TuningDb::Options());  // throws DATABASE_ERROR naming the file
  }
  const bool existed = fs::exists(user, ec);
  auto db = TuningDb::open_user(user, db_options());
  if (!existed) say("created {}", user.string());
  int failed = 0;
  for (const std::string& f : files) {
    try {
      const MergeReport r = db->merge_from(f);
      if (r.source_empty) {
        say("merged {} -> {}: nothing to merge: {} is an empty file (no tuning schema; a process killed while "
            "creating it leaves one)",
            f, user.string(), f);
        continue;
      }
      say("merged {} -> {}: {} run(s) added, {} already present, {} rejected, {} candidate row(s) rejected, "
                 "{} result(s) updated, {} module(s) added{}",
          f, user.string(), r.runs_added, r.runs_present, r.runs_rejected, r.candidates_rejected, r.results_updated,
          r.modules_added, r.modules_rejected ? fmt::format(", {} malformed module(s) skipped", r.modules_rejected) : "");
    } catch (const std::exception& e) {  // a merge is all or nothing: say so
      say_err("{}: merge {}: nothing from it was merged: {}", kTool, f, describe(e));
      ++failed;
    }
  }
  return failed ? kExitFailure : 0;
}

// A kernel change that leaves every tuned kernel's machine code as it was (attention dropout's own
// kernels, a comment) keeps the shipped winners valid: the timings were of the same code. Checked
// module by module: OLD_MODULES is the modules file of the winners' kernel source (it holds every
// winner's kernels), NEW_MODULES the same zoo compiled by this build. Dropout modules are not
// compared: dropout is not part of the database key, so no timing was of their code.
int cmd_restamp(const fs::path& user, const std::string& old_path, const std::string& new_path) {
  require_file(user);
  require_file(old_path);
  require_file(new_path);
  const std::string current = dfgnn::kernel_source_hash();
  auto modules_of = [&](const std::string& path) {
    std::vector<ModuleRecord> out = TuningDb::open_read_only(path, db_options())->modules();
    if (out.empty()) throw Failure{fmt::format("restamp: {} holds no module", path)};
    return out;
  };
  const std::vector<ModuleRecord> before = modules_of(old_path), after = modules_of(new_path);
  const std::string old_source = before.front().template_hash;
  for (const ModuleRecord& m : before)
    if (m.template_hash != old_source)
      throw Failure{fmt::format("restamp: {} mixes kernel sources ({} and {})", old_path, old_source, m.template_hash)};
  if (old_source == current)
    throw Failure{fmt::format("restamp: {} is of this build's kernel source already", old_path)};
  std::map<std::vector<std::string>, const ModuleRecord*> by_names;
  for (const ModuleRecord& m : after) {
    if (m.template_hash != current)
      throw Failure{fmt::format("restamp: {} was not compiled by this build (kernel source {}, this build's {})",
                                new_path, m.template_hash, current)};
    by_names[m.names] = &m;
  }
  auto code = [](const ModuleRecord& r) {
    return dfgnn::CubinElf(dfgnn::unpacked_module_image(r.image)).machine_code();
  };
  size_t same = 0, dropout = 0;
  std::vector<std::string> changed;
  for (const ModuleRecord& m : before) {
    if (std::any_of(m.names.begin(), m.names.end(), [](const std::string& n) { return dfgnn::without_dropout(n); })) {
      ++dropout;
      continue;
    }
    const auto it = by_names.find(m.names);
    if (it == by_names.end() || it->second->arch != m.arch) {
      changed.push_back(fmt::format("{}: not in {}", m.names.front(), new_path));
      continue;
    }
    if (code(m) == code(*it->second)) ++same;
    else changed.push_back(fmt::format("{}: other machine code", m.names.front()));
  }
  if (!changed.empty()) {
    for (size_t k = 0; k < std::min<size_t>(changed.size(), 10); ++k) say_err("  {}", changed[k]);
    throw Failure{fmt::format("restamp: {} of {} modules without dropout changed between {} and {}; the winners must "
                              "be tuned again; nothing was changed",
                              changed.size(), before.size() - dropout, old_path, new_path)};
  }
  auto db = TuningDb::open_user(user, db_options());
  const int64_t results = db->restamp(old_source, current);
  if (results == 0)
    throw Failure{fmt::format("restamp: {} holds no result of kernel source {}", user.string(), old_source)};
  say("restamped {}: {} result(s) from kernel source {} to {}: {} module(s) of the same machine code, {} with "
      "dropout not compared",
      user.string(), results, old_source, current, same, dropout);
  return 0;
}

int cmd_prune(const fs::path& user, const PruneFilter& filter) {
  require_file(user);
  auto db = TuningDb::open_user(user, db_options());
  const PruneReport r = db->prune(filter);
  say("pruned {}: {} run(s), {} result(s), {} module(s) deleted", user.string(), r.runs, r.results, r.modules);
  return 0;
}

int cmd_verify(std::vector<Target>& targets) {
  size_t problems = 0;
  for (Target& t : targets) {
    // A file that cannot be opened, or whose counts cannot be read, has that as its finding.
    std::vector<std::string> found;
    DbStats s;
    if (t.db == nullptr) {
      found.push_back("cannot be opened: " + t.error);
    } else {
      found = t.db->verify(dfgnn::row_problem);
      if (found.empty()) try {
          s = t.db->stats();
        } catch (const std::exception& e) {
          found.push_back("counting its rows failed: " + failure_text(e));
        }
    }
    if (found.empty()) {
      say("verify {}: OK (integrity, foreign keys, {} result(s), {} run(s), {} candidate stat(s), {} module(s))",
                 t.path.string(), s.results, s.runs, s.candidate_stats, s.modules);
    } else {
      say("verify {}: {} problem(s):", t.path.string(), found.size());
      for (const std::string& p : found) say("  {}", p);
    }
    problems += found.size();
  }
  return problems ? kExitFailure : 0;
}

// Each layer dispatch would read, with its status and what it was tuned for. This build's stamp
// (library version, kernel source hash) is known here; the GPU class is the GPU's, so a layer
// tuned for another GPU is listed, and dispatch on that GPU skips it.
int cmd_layers(const fs::path& user, const std::vector<fs::path>& sites) {
  const std::string library = dfgnnGetVersion();
  const std::string source = dfgnn::kernel_source_hash();
  say("this build: library {}, kernel source {}", library, source);
  say("shipped databases: {}", shipped_origin());
  int unusable = 0;
  // A file that opens may still hold damaged pages, which dispatch meets only on the lookup that
  // reads them: every page is read here (quick_check) before the layer is called ok.
  auto report = [&](const std::string& kind, const fs::path& path, TuningDb& db, const char* ok) {
    std::string damage = db.quick_check();
    DbStats s;
    std::vector<BuildStamp> stamps;
    if (damage.empty()) try {
        s = db.stats();
        stamps = db.build_stamps();
      } catch (const std::exception& e) {
        damage = describe(e);
      }
    if (!damage.empty()) {
      say("{} {}: DAMAGED: {} (dispatch skips it from its first failing read)", kind, path.string(), damage);
      ++unusable;
      return;
    }
    say("{} {}: {}", kind, path.string(), ok);
    say("    {} result(s), {} run(s), {} module(s)", s.results, s.runs, s.modules);
    for (const BuildStamp& b : stamps) {
      const bool current = b.library_version == library && b.template_hash == source;
      say("    {} result(s) for {}, library {}, kernel source {}{}", b.results, b.env_class, b.library_version,
          b.template_hash, current ? "" : "  (another build: not used by this one)");
    }
  };
  std::error_code ec;
  if (!fs::exists(user, ec)) {
    say("user     {}: absent (created by the first write: a tuning result or a compiled module)", user.string());
  } else {
    try {
      auto db = TuningDb::open_read_only(user, db_options());
      report("user    ", user, *db, "ok");
    } catch (const std::exception& e) {
      say("user     {}: UNUSABLE: {}", user.string(), describe(e));
      ++unusable;
    }
  }
  LayeredDb::Options options;
  options.user_path = fs::path();
  options.site_paths = sites;
  options.db = db_options();
  LayeredDb layers(options);
  auto opened = [&](const fs::path& path) -> TuningDb* {
    for (const auto* list : {&layers.sites(), &layers.shipped()})
      for (const auto& db : *list)
        if (db->path() == path) return db.get();
    return nullptr;
  };
  for (const LayeredDb::LayerInfo& l : layers.layers()) {
    const std::string kind = fmt::format("{:<8}", dfgnn::db::layer_name(l.kind));
    TuningDb* db = opened(l.path);
    if (db == nullptr) {
      say("{} {}: UNUSABLE: {}", kind, l.path.string(), l.reason);
      ++unusable;
      continue;
    }
    report(kind, l.path, *db, "ok (read-only)");
  }
  if (std::none_of(layers.layers().begin(), layers.layers().end(),
                   [](const LayeredDb::LayerInfo& l) { return l.kind == LayerKind::Shipped; }))
    say("shipped  (none)");
  return unusable ? kExitFailure : 0;
}

// ---------------------------------------------------------------- main

// The library's "dfgnn" logger, writing to stderr with the message escaped (its warnings quote
// rows of the databases being read or merged); level from DFGNN_LOG_LEVEL, else errors only
// (info with --verbose): the commands report rejected rows themselves.
void setup_logger(bool verbose) {
  class EscapedMessage : public spdlog::custom_flag_formatter {
   public:
    void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
      const std::string text = cli::printable(std::string_view(msg.payload.data(), msg.payload.size()));
      dest.append(text.data(), text.data() + text.size());
    }
    std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<EscapedMessage>(); }
  };
  std::shared_ptr<spdlog::logger> logger = spdlog::get("dfgnn");
  const char* level = std::getenv("DFGNN_LOG_LEVEL");
  if (!logger) {
    logger = spdlog::stderr_color_mt("dfgnn");
    if (level != nullptr) logger->set_level(spdlog::level::from_str(level));
  }
  if (level == nullptr) logger->set_level(verbose ? spdlog::level::info : spdlog::level::err);
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<EscapedMessage>('*').set_pattern("[%n] [%l] %*");
  logger->set_formatter(std::move(formatter));
}

int run(int argc, char** argv) {
  const std::string usage_text = usage();
  po::options_description visible(usage_text);
  std::string db_arg, env, library_version, template_hash;
  std::vector<std::string> site_args;
  double older_than_days = 0;
  visible.add_options()
    ("help,h", "show this help")
    ("version", "print the version")
    ("db", po::value(&db_arg), "the (user) database to work on")
    ("site", po::value(&site_args)->composing(), "a read-only site database for list, show, stats, verify, layers (repeatable)")
    ("shipped", "list, show, stats, verify: read the shipped databases (see layers)")
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
  // A command named: its --help is that command's help; an unknown name is an error, help or not.
  const Command* cmd = words.empty() ? nullptr : find_command(words[0]);
  if (!words.empty() && cmd == nullptr)
    throw BadArgs{fmt::format("unknown command '{}': use {} (see --help)", words[0], command_names())};
  if (cmd != nullptr && vm.count("help")) {
    print_command_help(*cmd, visible);
    return 0;
  }
  if (cli::print_help_or_version(kTool, vm.count("help") > 0, vm.count("version") > 0, visible)) return 0;
  setup_logger(vm.count("verbose") > 0);
  if (cmd == nullptr) throw BadArgs{fmt::format("no command given: {} (see --help)", command_names())};
  const std::string command = cmd->name;
  const bool reading = cmd->reads;
  const std::vector<std::string> args(words.begin() + 1, words.end());
  auto expect_args = [&](size_t n, const char* what) {
    if (args.size() != n)
      throw BadArgs{fmt::format("{} takes {} (got {} argument(s); see dfgnn-db {} --help)", command, what, args.size(),
                                command)};
  };
  for (const auto& option : visible.options()) {
    const std::string& name = option->long_name();
    if (vm.count(name) && !applies(*cmd, name)) {
      if (name == "site" || name == "shipped")
        throw BadArgs{fmt::format("--{} is for read commands (list, show, stats, verify{}), not {}", name,
                                  name == "site" ? ", layers" : "", command)};
      throw BadArgs{fmt::format("--{} does not apply to {} (see dfgnn-db {} --help)", name, command, command)};
    }
  }
  if (vm.count("db") && db_arg.empty()) throw BadArgs{"--db needs a file name"};
  if (vm.count("env") && env.empty()) throw BadArgs{"--env needs an environment class"};

  // The user database: --db, else the default location (not for reads that name --site only).
  std::optional<fs::path> user;
  if (vm.count("db")) {
    user = db_arg;
  } else if ((site_args.empty() && !vm.count("shipped")) || !reading || command == "layers") {
    const fs::path d = LayeredDb::default_user_path();
    if (d.empty())
      throw BadArgs{"no database: give --db PATH (none of DFGNN_CACHE_DIR, XDG_CACHE_HOME, HOME is set)"};
    user = d;
  }
  std::vector<fs::path> sites(site_args.begin(), site_args.end());
  std::vector<fs::path> shipped;
  if (vm.count("shipped")) {
    shipped = LayeredDb::default_shipped_paths();
    if (shipped.empty()) throw Failure{fmt::format("--shipped: no shipped databases ({})", shipped_origin())};
  }

  if (command == "list") {
    expect_args(0, "no arguments");
    auto targets = open_for_reading(user, sites, shipped);
    return cmd_list(targets, vm.count("env") ? std::optional<std::string>(env) : std::nullopt);
  }
  if (command == "show") {
    expect_args(1, "one result ID");
    auto targets = open_for_reading(user, sites, shipped);
    return cmd_show(targets, args[0]);
  }
  if (command == "stats") {
    expect_args(0, "no arguments");
    auto targets = open_for_reading(user, sites, shipped);
    return cmd_stats(targets);
  }
  if (command == "verify") {
    expect_args(0, "no arguments");
    auto targets = open_for_reading(user, sites, shipped);
    return cmd_verify(targets);
  }
  if (command == "layers") {
    expect_args(0, "no arguments");
    return cmd_layers(*user, vm.count("site") ? sites : LayeredDb::default_site_paths());
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
  if (command == "restamp") {
    expect_args(2, "the modules file of the results' kernel source and this build's (restamp OLD.db NEW.db)");
    return cmd_restamp(*user, args[0], args[1]);
  }
  // prune
  expect_args(0, "filters only (--env, --older-than, --library-version, --template-hash)");
  PruneFilter filter;
  if (vm.count("env")) filter.env_class = env;
  if (vm.count("older-than")) {
    // At most a million days (2700 years): the cutoff below stays far inside 64-bit seconds.
    if (!(older_than_days >= 0 && older_than_days <= 1e6))
      throw BadArgs{fmt::format("--older-than {} must be a number of days from 0 to 1000000", older_than_days)};
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
    // Messages may quote database text: printed escaped, like everything else.
    try {
      return run(argc, argv);
    } catch (const BadArgs& e) {
      say_err("{}: {}", kTool, e.message);
      return cli::kExitBadArgs;
    } catch (const Failure& e) {
      say_err("{}: {}", kTool, e.message);
      return kExitFailure;
    } catch (const std::exception& e) {  // the library's errors name their status
      say_err("{}: {}", kTool, describe(e));
      return kExitFailure;
    }
  });
}
