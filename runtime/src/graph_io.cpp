// Graph files (dataset edge lists, Matrix Market; plain or gzip) and seeded synthetic generators
// (R-MAT, planted hubs). Everything here is single-threaded and deterministic.
#include "graph_io.hpp"

#include "error.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <string_view>
#include <utility>

namespace dfgnn {
namespace {

constexpr int64_t kMaxEdges = std::numeric_limits<int32_t>::max();  // dfgnn's int32 internal indices
constexpr int64_t kMaxNodes = kMaxEdges - 1;

// ---------------------------------------------------------------- reading lines

// The bytes of a file, inflated when it starts with the gzip magic (whatever its name). Unlike
// zlib's gzread, which skips anything after the last gzip member without a word, this rejects
// trailing bytes that are not a further member (concatenated members are read as one stream).
class ByteSource {
 public:
  explicit ByteSource(std::string path) : path_(std::move(path)), in_(kChunk) {
    // O_NONBLOCK: opening a FIFO must not wait for a writer; only regular files are read (as the
    // database layers refuse a FIFO), so a named pipe, socket or device is refused at once.
    const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) fail(DFGNN_STATUS_IO_ERROR, "cannot open '{}': {}", path_, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int why = errno;
      ::close(fd);
      fail(DFGNN_STATUS_IO_ERROR, "cannot read '{}': {}", path_, std::strerror(why));
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      fail(DFGNN_STATUS_IO_ERROR, "'{}' {}: graph files are read only from regular files", path_,
           S_ISFIFO(st.st_mode) ? "is a FIFO (named pipe), not a regular file" : "is not a regular file");
    }
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    file_.reset(::fdopen(fd, "rb"));
    if (file_ == nullptr) {
      const int why = errno;
      ::close(fd);
      fail(DFGNN_STATUS_IO_ERROR, "cannot open '{}': {}", path_, std::strerror(why));
    }
    refill_input();
    gzip_ = z_.avail_in >= 2 && in_[0] == 0x1f && in_[1] == 0x8b;
    if (gzip_ && inflateInit2(&z_, 16 + MAX_WBITS) != Z_OK) throw std::bad_alloc();
  }
  ~ByteSource() {
    if (gzip_) inflateEnd(&z_);
  }
  ByteSource(const ByteSource&) = delete;
  ByteSource& operator=(const ByteSource&) = delete;

  // Up to n bytes into out; 0 only at the end of the data.
  size_t read(char* out, size_t n) {
    if (!gzip_) {
      if (z_.avail_in == 0 && !refill_input()) return 0;
      const size_t k = std::min<size_t>(n, z_.avail_in);
      std::memcpy(out, z_.next_in, k);
      z_.next_in += k;
      z_.avail_in -= static_cast<uInt>(k);
      return k;
    }
    z_.next_out = reinterpret_cast<Bytef*>(out);
    z_.avail_out = static_cast<uInt>(std::min<size_t>(n, std::numeric_limits<uInt>::max()));
    const uInt wanted = z_.avail_out;
    while (z_.avail_out == wanted) {
      if (z_.avail_in == 0 && !refill_input()) {
        if (between_members_) return 0;
        gzip_failure("unexpected end of file (truncated gzip data)");
      }
      between_members_ = false;
      const int rc = inflate(&z_, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) {
        ++members_;
        inflateReset(&z_);
        between_members_ = true;
      } else if (rc == Z_MEM_ERROR) {
        throw std::bad_alloc();
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        gzip_failure(z_.msg != nullptr ? z_.msg : "corrupt gzip data");
      }
    }
    return wanted - z_.avail_out;
  }

 private:
  static constexpr size_t kChunk = size_t{1} << 20;

  bool refill_input() {
    const size_t n = std::fread(in_.data(), 1, in_.size(), file_.get());
    if (n == 0 && std::ferror(file_.get())) fail(DFGNN_STATUS_IO_ERROR, "cannot read '{}': {}", path_, std::strerror(errno));
    z_.next_in = in_.data();
    z_.avail_in = static_cast<uInt>(n);
    return n > 0;
  }

  // A failure inside the first gzip member is a damaged file (IO_ERROR); after a complete member
  // the bytes that follow are not gzip at all (PARSE_ERROR).
  [[noreturn]] void gzip_failure(std::string_view what) const {
    if (members_ > 0)
      fail(DFGNN_STATUS_PARSE_ERROR, "'{}': trailing garbage after the gzip data ({})", path_, what);
    fail(DFGNN_STATUS_IO_ERROR, "cannot read '{}': {}", path_, what);
  }

  std::string path_;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file_{nullptr, &std::fclose};
  std::vector<Bytef> in_;
  z_stream z_{};
  bool gzip_ = false;
  bool between_members_ = false;  // the last member ended and nothing of another was read
  int64_t members_ = 0;           // complete gzip members read
};

// Lines of a file, read in large chunks.
class LineReader {
 public:
  explicit LineReader(std::string path) : path_(std::move(path)), source_(path_), buf_(kChunk) {}

  // Next line without its "\n" or "\r\n"; false at the end of the file. The view lives until the
  // next call.
  bool next(std::string_view& line) {
    for (;;) {
      const char* start = buf_.data() + begin_;
      if (const void* nl = std::memchr(start, '\n', end_ - begin_)) {
        const size_t length = static_cast<const char*>(nl) - start;
        begin_ += length + 1;
        return emit(line, {start, length});
      }
      if (eof_) {
        if (begin_ == end_) return false;
        const size_t length = end_ - begin_;
        begin_ = end_;
        return emit(line, {start, length});  // last line without a final newline
      }
      refill();
    }
  }
  int64_t line_number() const { return line_number_; }
  const std::string& path() const { return path_; }

 private:
  static constexpr size_t kChunk = size_t{1} << 20;
  static constexpr size_t kMaxLine = size_t{1} << 24;

  bool emit(std::string_view& line, std::string_view text) {
    if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
    line = text;
    ++line_number_;
    return true;
  }

  // Moves the partial line to the front and appends the next chunk.
  void refill() {
    std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
    if (end_ == buf_.size()) {
      if (buf_.size() >= kMaxLine)
        fail(DFGNN_STATUS_PARSE_ERROR, "{}:{}: line is longer than {} bytes", path_, line_number_ + 1, kMaxLine);
      buf_.resize(buf_.size() * 2);
    }
    const size_t n = source_.read(buf_.data() + end_, buf_.size() - end_);
    if (n == 0) eof_ = true;
    end_ += n;
  }

  std::string path_;
  ByteSource source_;
  std::vector<char> buf_;
  size_t begin_ = 0, end_ = 0;
  bool eof_ = false;
  int64_t line_number_ = 0;
};

// ---------------------------------------------------------------- tokens

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

bool is_blank_line(std::string_view s) { return std::all_of(s.begin(), s.end(), is_blank); }

// Next blank-separated token of s (empty at the end), consumed from s.
std::string_view next_token(std::string_view& s) {
  size_t i = 0;
  while (i < s.size() && is_blank(s[i])) ++i;
  size_t j = i;
  while (j < s.size() && !is_blank(s[j])) ++j;
  const std::string_view token = s.substr(i, j - i);
  s.remove_prefix(j);
  return token;
}

template <typename T>
std::optional<T> parse_number(std::string_view token) {
  T value{};
  const auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), value);
  if (ec != std::errc() || end != token.data() + token.size() || token.empty()) return std::nullopt;
  return value;
}

// A count or a node id: digits only. from_chars alone would take "-0" as 0.
std::optional<int64_t> parse_non_negative(std::string_view token) {
  if (!token.empty() && token.front() == '-') return std::nullopt;
  return parse_number<int64_t>(token);
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Text from a file quoted in an error message (a line, a token, a banner word): cut short, every
// byte outside printable ASCII shown as '?' (files may be binary; escape sequences and Unicode
// bidirectional controls must not reach a terminal through the message).
std::string quote(std::string_view s) {
  constexpr size_t kShown = 60;
  std::string out;
  for (char c : s.substr(0, kShown)) out += std::isprint(static_cast<unsigned char>(c)) ? c : '?';
  if (s.size() > kShown) out += "...";
  return "'" + out + "'";
}

bool ends_with_nocase(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && lower(s.substr(s.size() - suffix.size())) == suffix;
}

[[noreturn]] void parse_error(const LineReader& in, std::string_view what, std::string_view line) {
  fail(DFGNN_STATUS_PARSE_ERROR, "{}:{}: {} (line: {})", in.path(), in.line_number(), what, quote(line));
}

// Sizes from a file header must fit dfgnn's int32 indices; checked before anything is read.
void check_declared_sizes(const LineReader& in, int64_t nodes, int64_t edges) {
  if (nodes > kMaxNodes || edges > kMaxEdges)
    fail(DFGNN_STATUS_INDEX_OVERFLOW, "{}:{}: {} nodes / {} edges exceed dfgnn's limits ({} / {})", in.path(),
         in.line_number(), nodes, edges, kMaxNodes, kMaxEdges);
}

// A header's edge count is only a hint for reserving memory, never more than the file could hold
// (min_line_bytes per line, uncompressed); arrays grow with what is actually read (gzip input
// beyond the hint), so a short file with a large count allocates little.
size_t edge_reservation(const LineReader& in, int64_t declared, int64_t min_line_bytes) {
  std::error_code ec;
  const uintmax_t bytes = std::filesystem::file_size(in.path(), ec);
  const int64_t could_hold = ec ? 0 : static_cast<int64_t>(std::min<uintmax_t>(bytes, kMaxEdges)) / min_line_bytes;
  return static_cast<size_t>(std::min(declared, could_hold));
}

// Node-count policy (README, dfgnnGraphCreateFromFile): a header may declare nodes beyond the
// largest id read (isolated nodes), but at most kIsolatedFactor x min(largest id + 1, 2 x edges
// read) + kIsolatedSlack. E edges touch at most 2E nodes, so the O(N) arrays the graph builds after
// reading (row pointers, degrees) stay proportional to what was read: neither a few bytes of
// header nor one large node id can make them of any size. Checked once the whole file is read and
// before anything N-sized is allocated (reading keeps only the edges).
constexpr int64_t kIsolatedFactor = 16, kIsolatedSlack = int64_t{1} << 16;

void check_node_count(const LineReader& in, int64_t declared, int64_t max_id, int64_t edges, std::string_view where) {
  const int64_t touchable = 2 * edges;  // edges <= kMaxEdges: no overflow
  const bool by_edges = max_id + 1 > touchable;
  const int64_t bound = kIsolatedFactor * (by_edges ? touchable : max_id + 1) + kIsolatedSlack;
  if (declared <= bound) return;
  if (by_edges)
    fail(DFGNN_STATUS_PARSE_ERROR,
         "{}: {} declares {} nodes for {} edge(s) read, {:.0f} nodes per edge (largest node id {}); at most {} x "
         "(2 x edges) + {} = {} nodes are accepted from a file, so that memory grows with what is read (build a "
         "graph with more isolated nodes with dfgnnGraphCreateCoo)",
         in.path(), where, declared, edges, static_cast<double>(declared) / static_cast<double>(edges), max_id,
         kIsolatedFactor, kIsolatedSlack, bound);
  fail(DFGNN_STATUS_PARSE_ERROR,
         "{}: {} declares {} nodes but {}; at most {} x (largest id + 1) + {} = {} nodes are accepted from a file "
         "(build a graph with more isolated nodes with dfgnnGraphCreateCoo)",
         in.path(), where, declared,
         max_id < 0 ? std::string("no node id was read") : fmt::format("the largest node id read is {}", max_id),
         kIsolatedFactor, kIsolatedSlack, bound);
}

// Reads the next token as a node id in [first, first + n); describes the problem otherwise.
int64_t read_id(const LineReader& in, std::string_view& rest, std::string_view line, int64_t first, int64_t n) {
  const std::string_view token = next_token(rest);
  if (token.empty()) parse_error(in, "expected two node ids", line);
  const std::optional<int64_t> id = parse_non_negative(token);
  if (!id) parse_error(in, fmt::format("{} is not a non-negative integer", quote(token)), line);
  if (*id < first || *id >= first + n)
    parse_error(in, first == 0 ? fmt::format("node id {} is out of range [0, {})", *id, n)
                               : fmt::format("index {} is out of range [1, {}]", *id, n), line);
  return *id - first;
}

void expect_end(const LineReader& in, std::string_view rest, std::string_view line, std::string_view expected) {
  if (!next_token(rest).empty()) parse_error(in, fmt::format("unexpected extra token, expected {}", expected), line);
}

// ---------------------------------------------------------------- dataset edge list

// "# nodes N edges E ..." then exactly E lines "src dst" with 0-based ids (nodes: check_node_count).
EdgeList read_edge_list(LineReader& in) {
  std::string_view line;
  if (!in.next(line))
    fail(DFGNN_STATUS_PARSE_ERROR, "{}:1: empty file, expected a '# nodes N edges E' header", in.path());
  std::string_view rest = line;
  std::optional<int64_t> nodes, edges;
  if (next_token(rest) == "#" && next_token(rest) == "nodes") nodes = parse_non_negative(next_token(rest));
  if (nodes && next_token(rest) == "edges") edges = parse_non_negative(next_token(rest));
  if (!nodes || !edges)
    parse_error(in, "expected a '# nodes N edges E' header with non-negative N and E", line);
  check_declared_sizes(in, *nodes, *edges);

  const size_t hint = edge_reservation(in, *edges, 4);  // "a b\n"
  std::vector<int64_t> src, dst;
  src.reserve(2 * hint);  // room for the destinations appended at the end
  dst.reserve(hint);
  int64_t count = 0, max_id = -1;
  while (in.next(line)) {
    if (count == *edges) parse_error(in, fmt::format("more edge lines than the {} declared in the header", *edges), line);
    rest = line;
    const int64_t s = read_id(in, rest, line, 0, *nodes), d = read_id(in, rest, line, 0, *nodes);
    expect_end(in, rest, line, "two node ids 'src dst'");
    src.push_back(s);
    dst.push_back(d);
    max_id = std::max({max_id, s, d});
    ++count;
  }
  if (count != *edges)
    fail(DFGNN_STATUS_PARSE_ERROR, "{}:{}: file ends after {} edge lines, the header declares {}", in.path(),
         in.line_number(), count, *edges);
  check_node_count(in, *nodes, max_id, count, "the header");

  EdgeList out;
  out.num_nodes = *nodes;
  out.edge_index = std::move(src);
  out.edge_index.insert(out.edge_index.end(), dst.begin(), dst.end());
  return out;
}

// ---------------------------------------------------------------- Matrix Market

// Coordinate format only. Entry (r, c) (1-based) is the edge r-1 -> c-1; symmetric (and
// skew-symmetric, whose pattern is symmetric too) files store one triangle, so off-diagonal
// entries are mirrored. Values are checked for syntax and otherwise ignored.
EdgeList read_matrix_market(LineReader& in) {
  std::string_view line;
  if (!in.next(line)) fail(DFGNN_STATUS_PARSE_ERROR, "{}:1: empty file, expected a %%MatrixMarket banner", in.path());
  std::string_view rest = line;
  if (lower(next_token(rest)) != "%%matrixmarket")
    parse_error(in, "expected the banner '%%MatrixMarket matrix coordinate <field> <symmetry>'", line);
  const std::string object = lower(next_token(rest)), format = lower(next_token(rest));
  const std::string field = lower(next_token(rest)), symmetry = lower(next_token(rest));
  // Every word is quoted through quote(), as the line is.
  if (object != "matrix") parse_error(in, fmt::format("object {} is not supported, expected 'matrix'", quote(object)), line);
  if (format == "array") parse_error(in, "dense 'array' format is not supported, expected 'coordinate'", line);
  if (format != "coordinate") parse_error(in, fmt::format("format {} is not 'coordinate'", quote(format)), line);
  if (field == "complex") parse_error(in, "'complex' matrices are not supported", line);
  if (field != "pattern" && field != "real" && field != "integer")
    parse_error(in, fmt::format("field {} is not pattern, real or integer", quote(field)), line);
  if (symmetry == "hermitian") parse_error(in, "'hermitian' matrices are not supported", line);
  if (symmetry != "general" && symmetry != "symmetric" && symmetry != "skew-symmetric")
    parse_error(in, fmt::format("symmetry {} is not general or symmetric", quote(symmetry)), line);
  const bool mirror = symmetry != "general";

  // Comment and blank lines are skipped wherever they appear after the banner.
  const auto next_data_line = [&] {
    while (in.next(line))
      if (!is_blank_line(line) && line.front() != '%') return true;
    return false;
  };
  if (!next_data_line())
    fail(DFGNN_STATUS_PARSE_ERROR, "{}:{}: missing the size line 'rows cols entries'", in.path(), in.line_number());
  rest = line;
  const auto rows = parse_non_negative(next_token(rest)), cols = parse_non_negative(next_token(rest));
  const auto nnz = parse_non_negative(next_token(rest));
  if (!rows || !cols || !nnz || !next_token(rest).empty())
    parse_error(in, "expected the size line 'rows cols entries' (three non-negative integers)", line);
  if (*rows != *cols) parse_error(in, fmt::format("matrix is {} x {}, an adjacency matrix must be square", *rows, *cols), line);
  // A mirrored entry is two edges; a count already over the limit is not doubled (it could overflow).
  check_declared_sizes(in, *rows, mirror && *nnz <= kMaxEdges ? 2 * *nnz : *nnz);

  const size_t hint = (mirror ? 2 : 1) * edge_reservation(in, *nnz, 4);  // "r c\n"
  std::vector<int64_t> src, dst;
  src.reserve(2 * hint);  // room for the destinations appended at the end
  dst.reserve(hint);
  int64_t max_id = -1;
  const std::string_view expected = field == "pattern" ? "'row col'" : "'row col value'";
  for (int64_t k = 0; k < *nnz; ++k) {
    if (!next_data_line())
      fail(DFGNN_STATUS_PARSE_ERROR, "{}:{}: file ends after {} entries, the size line declares {}", in.path(),
           in.line_number(), k, *nnz);
    rest = line;
    const int64_t r = read_id(in, rest, line, 1, *rows), c = read_id(in, rest, line, 1, *rows);
    if (field != "pattern") {
      const std::string_view value = next_token(rest);
      const bool ok = field == "real" ? parse_number<double>(value).has_value() : parse_number<int64_t>(value).has_value();
      if (!ok) parse_error(in, fmt::format("expected a value ({} field) after the indices, got {}", field, quote(value)), line);
    }
    expect_end(in, rest, line, expected);
    src.push_back(r);
    dst.push_back(c);
    max_id = std::max({max_id, r, c});
    if (mirror && r != c) {
      src.push_back(c);
      dst.push_back(r);
    }
  }
  if (next_data_line()) parse_error(in, fmt::format("more entries than the {} declared in the size line", *nnz), line);
  check_node_count(in, *rows, max_id, static_cast<int64_t>(src.size()), "the size line");

  EdgeList out;
  out.num_nodes = *rows;
  out.edge_index = std::move(src);
  out.edge_index.insert(out.edge_index.end(), dst.begin(), dst.end());
  return out;
}

// ---------------------------------------------------------------- random numbers

constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ULL;

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// splitmix64: tiny and fast, and its k-th output is mix64(state0 + k * gamma), so a stream can
// jump ahead in O(1) if generation is ever split across threads.
struct SplitMix64 {
  uint64_t state;
  // Independent streams per purpose (edges, noise, permutation) from one user seed.
  SplitMix64(uint64_t seed, uint64_t stream) : state(mix64(seed ^ mix64(stream + kGamma))) {}
  uint64_t next() { return mix64(state += kGamma); }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  // Unbiased integer in [0, n), n >= 1 (Lemire's multiply-and-reject).
  uint64_t below(uint64_t n) {
    unsigned __int128 m = static_cast<unsigned __int128>(next()) * n;
    if (static_cast<uint64_t>(m) < n) {
      const uint64_t threshold = -n % n;
      while (static_cast<uint64_t>(m) < threshold) m = static_cast<unsigned __int128>(next()) * n;
    }
    return static_cast<uint64_t>(m >> 64);
  }
};

// LSD radix sort of keys below 2^bits: a few linear passes, several times faster than std::sort
// at the 10^7-key sizes R-MAT produces.
void radix_sort(std::vector<uint64_t>& keys, int bits) {
  if (keys.size() < (size_t{1} << 16)) return std::sort(keys.begin(), keys.end());
  const int passes = std::max(1, (bits + 15) / 16);
  const int digit = (bits + passes - 1) / passes;
  const uint64_t mask = (uint64_t{1} << digit) - 1;
  std::vector<uint64_t> scratch(keys.size());
  std::vector<size_t> offset(size_t{1} << digit);
  for (int pass = 0; pass < passes; ++pass) {
    const int shift = pass * digit;
    std::fill(offset.begin(), offset.end(), 0);
    for (uint64_t k : keys) ++offset[(k >> shift) & mask];
    size_t sum = 0;
    for (size_t& o : offset) sum += std::exchange(o, sum);
    for (uint64_t k : keys) scratch[offset[(k >> shift) & mask]++] = k;
    keys.swap(scratch);
  }
}

}  // namespace

// ---------------------------------------------------------------- public entry points

EdgeList read_graph_file(const std::string& path) {
  std::string file = path;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    const std::filesystem::path dir(path);
    if (std::filesystem::exists(dir / "edges.txt", ec)) file = (dir / "edges.txt").string();
    else if (std::filesystem::exists(dir / "edges.txt.gz", ec)) file = (dir / "edges.txt.gz").string();
    else fail(DFGNN_STATUS_IO_ERROR, "directory '{}' has neither edges.txt nor edges.txt.gz", path);
  }
  LineReader in(file);
  return ends_with_nocase(file, ".mtx") || ends_with_nocase(file, ".mtx.gz") ? read_matrix_market(in)
                                                                             : read_edge_list(in);
}

EdgeList generate_rmat(int32_t scale, int64_t num_edges, double a, double b, double c, uint32_t flags,
                       uint64_t seed) {
  require(scale >= 1 && scale <= 30, "scale must be in [1, 30], got {}", scale);
  require(num_edges >= 0 && num_edges <= kMaxEdges, "num_edges must be in [0, 2^31-1], got {}", num_edges);
  require(a >= 0 && std::isfinite(a), "a must be a finite probability >= 0, got {}", a);  // also rejects NaN
  require(b >= 0 && std::isfinite(b), "b must be a finite probability >= 0, got {}", b);
  require(c >= 0 && std::isfinite(c), "c must be a finite probability >= 0, got {}", c);
  require(a + b + c <= 1 + 1e-9, "a + b + c must be <= 1 (d = 1 - a - b - c), got {}", a + b + c);
  constexpr uint32_t kKnown =
      DFGNN_RMAT_DEDUPLICATE | DFGNN_RMAT_NO_SELF_LOOPS | DFGNN_RMAT_PERMUTE_IDS | DFGNN_RMAT_SYMMETRIZE;
  require((flags & ~kKnown) == 0, "flags has unknown bits {:#x}", flags & ~kKnown);
  const double d = std::max(0.0, 1 - a - b - c);

  // Per-level quadrant thresholds on a 32-bit draw. Each level's a, b, c, d are scaled by an
  // independent factor in [0.95, 1.05] and renormalised (the usual R-MAT noise): it smooths the
  // staircase degree distribution of exact Kronecker products at no per-edge cost.
  struct Level {
    uint64_t a, ab, abc;
  };
  std::vector<Level> levels(scale);
  SplitMix64 noise(seed, 1);
  for (Level& level : levels) {
    double p[4] = {a, b, c, d}, sum = 0;
    for (double& x : p) sum += (x *= 0.95 + 0.1 * noise.uniform());
    const auto threshold = [&](double cumulative) {
      return static_cast<uint64_t>(std::min(cumulative / sum, 1.0) * 0x1.0p32);
    };
    level = {threshold(p[0]), threshold(p[0] + p[1]), threshold(p[0] + p[1] + p[2])};
  }

  // Edges as packed keys (dst << scale | src): sorting them orders by (dst, src).
  const uint64_t id_mask = (uint64_t{1} << scale) - 1;
  std::vector<uint64_t> keys(static_cast<size_t>(num_edges));
  SplitMix64 rng(seed, 2);  // every edge takes exactly ceil(scale / 2) draws: edge e is reachable by a jump
  for (uint64_t& key : keys) {
    uint64_t src = 0, dst = 0, bits = 0;
    for (int l = 0; l < scale; ++l) {
      if ((l & 1) == 0) bits = rng.next();
      const uint64_t u = bits & 0xffffffffu;
      bits >>= 32;
      const Level& t = levels[l];
      // Quadrants a | b / c | d: lower half (c, d) sets the source bit, right half (b, d) the target bit.
      src = (src << 1) | (u >= t.ab);
      dst = (dst << 1) | ((u >= t.a) ^ (u >= t.ab) ^ (u >= t.abc));
    }
    key = (dst << scale) | src;
  }

  const auto src_of = [&](uint64_t key) { return key & id_mask; };
  const auto dst_of = [&](uint64_t key) { return key >> scale; };
  if (flags & DFGNN_RMAT_PERMUTE_IDS) {
    // Own stream, so the permuted graph is the unpermuted one relabelled.
    std::vector<uint32_t> perm(size_t{1} << scale);
    for (uint32_t i = 0; i < perm.size(); ++i) perm[i] = i;
    SplitMix64 shuffle(seed, 3);
    for (size_t i = perm.size() - 1; i > 0; --i) std::swap(perm[i], perm[shuffle.below(i + 1)]);
    for (uint64_t& key : keys) key = (uint64_t{perm[dst_of(key)]} << scale) | perm[src_of(key)];
  }
  if (flags & DFGNN_RMAT_NO_SELF_LOOPS)
    std::erase_if(keys, [&](uint64_t key) { return src_of(key) == dst_of(key); });
  if (flags & DFGNN_RMAT_SYMMETRIZE) {
    // A self-loop is its own reverse and is not doubled.
    const size_t n = keys.size();
    keys.reserve(2 * n);
    for (size_t i = 0; i < n; ++i)
      if (src_of(keys[i]) != dst_of(keys[i])) keys.push_back((src_of(keys[i]) << scale) | dst_of(keys[i]));
  }
  if (flags & DFGNN_RMAT_DEDUPLICATE) {
    radix_sort(keys, 2 * scale);
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  }

  EdgeList out;
  out.num_nodes = int64_t{1} << scale;
  out.edge_index.resize(2 * keys.size());
  for (size_t e = 0; e < keys.size(); ++e) {
    out.edge_index[e] = static_cast<int64_t>(src_of(keys[e]));
    out.edge_index[keys.size() + e] = static_cast<int64_t>(dst_of(keys[e]));
  }
  return out;
}

EdgeList generate_planted_hubs(int64_t num_nodes, int32_t avg_degree, int32_t num_hubs, int64_t hub_degree,
                               uint64_t seed) {
  require(num_nodes >= 1, "num_nodes must be >= 1, got {}", num_nodes);
  require(avg_degree >= 0, "avg_degree must be >= 0, got {}", avg_degree);
  require(num_hubs >= 0 && num_hubs <= num_nodes, "num_hubs must be in [0, num_nodes = {}], got {}", num_nodes,
          num_hubs);
  require(hub_degree >= 0, "hub_degree must be >= 0, got {}", hub_degree);
  require(num_hubs == 0 || hub_degree <= num_nodes - 1,
          "hub_degree must be <= num_nodes - 1 = {} (distinct sources, no self-loops), got {}", num_nodes - 1,
          hub_degree);
  require(avg_degree == 0 || num_nodes >= 2, "avg_degree > 0 needs num_nodes >= 2 (no self-loops)");
  // In floating point first: the exact product may not fit int64.
  const double total = static_cast<double>(num_nodes) * avg_degree + 2.0 * num_hubs * static_cast<double>(hub_degree);
  require(total <= static_cast<double>(kMaxEdges), "num_nodes * avg_degree + 2 * num_hubs * hub_degree = {} exceeds {} edges",
          total, kMaxEdges);
  const auto num_edges = static_cast<size_t>(num_nodes * avg_degree + 2 * num_hubs * hub_degree);
  // Before anything num_nodes-sized is allocated (the hubs' bitmap); the status Graph::from_coo gives.
  if (num_nodes > kMaxNodes)
    fail(DFGNN_STATUS_INDEX_OVERFLOW, "num_nodes = {} exceeds dfgnn's limit of {} nodes", num_nodes, kMaxNodes);

  EdgeList out;
  out.num_nodes = num_nodes;
  std::vector<int64_t> src, dst;
  src.reserve(num_edges);
  dst.reserve(num_edges);
  const auto add = [&](int64_t j, int64_t i) {
    src.push_back(j);
    dst.push_back(i);
  };
  // A uniform pick among the num_nodes - 1 nodes other than `self`.
  const auto other_than = [](int64_t self, uint64_t r) { return static_cast<int64_t>(r) + (static_cast<int64_t>(r) >= self); };

  // Uniform part: sources drawn with replacement, so a node may get a few parallel edges.
  SplitMix64 rng(seed, 4);
  for (int64_t i = 0; i < num_nodes; ++i)
    for (int32_t k = 0; k < avg_degree; ++k) add(other_than(i, rng.below(num_nodes - 1)), i);

  // Hubs: hub_degree distinct sources each (Floyd's sampling, O(hub_degree) per hub with a bitmap
  // that is cleared after each hub), then the same edges reversed.
  std::vector<bool> taken(num_hubs > 0 ? static_cast<size_t>(num_nodes) : 0);
  std::vector<int64_t> picked;
  for (int32_t h = 0; h < num_hubs; ++h) {
    picked.clear();
    for (int64_t j = num_nodes - 1 - hub_degree; j < num_nodes - 1; ++j) {
      const auto t = static_cast<int64_t>(rng.below(static_cast<uint64_t>(j) + 1));
      const int64_t v = taken[t] ? j : t;
      taken[v] = true;
      picked.push_back(v);
    }
    for (int64_t v : picked) {
      taken[v] = false;
      add(other_than(h, static_cast<uint64_t>(v)), h);
    }
    for (int64_t v : picked) add(h, other_than(h, static_cast<uint64_t>(v)));
  }

  out.edge_index = std::move(src);
  out.edge_index.insert(out.edge_index.end(), dst.begin(), dst.end());
  return out;
}

}  // namespace dfgnn
