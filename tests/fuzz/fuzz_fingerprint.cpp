// Fingerprint JSON through dfgnnFingerprintParse / dfgnnFingerprintSerialize.
// Properties: a text that parses serialises (buffer protocol: sizing call, exact length, zero
// terminator) to text that parses to the bitwise-same fingerprint and serialises identically; its
// distance to itself is 0 and its bucket key is produced; a failed parse is a PARSE_ERROR with a
// message and leaves no half-filled result claimed as success.
#include "fuzz_util.hpp"

#include <cmath>
#include <string>

namespace {

std::string serialize(const dfgnn_fingerprint_t& fp) {
  size_t length = 0;
  const dfgnn_status_t sized = dfgnnFingerprintSerialize(&fp, nullptr, 0, &length);
  FUZZ_CHECK(sized == DFGNN_STATUS_SUCCESS, dfgnnGetLastErrorMessage());
  std::string buffer(length + 1, '\x7f');
  size_t written = 0;
  FUZZ_CHECK(dfgnnFingerprintSerialize(&fp, buffer.data(), buffer.size(), &written) == DFGNN_STATUS_SUCCESS,
             dfgnnGetLastErrorMessage());
  FUZZ_CHECK(written == length && buffer[length] == '\0', "buffer protocol");
  buffer.resize(length);
  FUZZ_CHECK(buffer.find('\0') == std::string::npos, "zero byte inside the text");
  return buffer;
}

// Field by field, doubles bitwise (padding bytes are not part of the value).
bool same(const dfgnn_fingerprint_t& a, const dfgnn_fingerprint_t& b) {
  const auto bits = [](const double& x, const double& y) { return std::memcmp(&x, &y, sizeof x) == 0; };
  bool ok = a.version == b.version && a.num_nodes == b.num_nodes && a.num_edges == b.num_edges &&
            a.max_degree == b.max_degree && bits(a.mean_degree, b.mean_degree) && bits(a.p50, b.p50) &&
            bits(a.p90, b.p90) && bits(a.p99, b.p99) && bits(a.p999, b.p999) && bits(a.cv, b.cv) &&
            bits(a.gini, b.gini) && bits(a.top1pct_edge_share, b.top1pct_edge_share);
  for (int i = 0; i < DFGNN_FINGERPRINT_HIST_BINS; ++i) ok = ok && bits(a.hist[i], b.hist[i]);
  for (int k = 0; k < DFGNN_FINGERPRINT_HUB_THRESHOLDS; ++k) ok = ok && a.hub_rows[k] == b.hub_rows[k];
  return ok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);  // c_str(): stops at a zero byte
  dfgnn_fingerprint_t fp{};
  const dfgnn_status_t status = dfgnnFingerprintParse(text.c_str(), &fp);
  fuzz::check_error_message(status);
  if (status != DFGNN_STATUS_SUCCESS) {
    FUZZ_CHECK(status == DFGNN_STATUS_PARSE_ERROR, dfgnnGetLastErrorMessage());
    return 0;
  }
  FUZZ_CHECK(fp.version == DFGNN_FINGERPRINT_VERSION, "version");
  const std::string printed = serialize(fp);
  dfgnn_fingerprint_t again{};
  FUZZ_CHECK(dfgnnFingerprintParse(printed.c_str(), &again) == DFGNN_STATUS_SUCCESS,
             printed + ": " + dfgnnGetLastErrorMessage());
  FUZZ_CHECK(same(fp, again), "round trip changed the value: " + printed);
  FUZZ_CHECK(serialize(again) == printed, printed);

  double d = -1;
  FUZZ_CHECK(dfgnnFingerprintDistance(&fp, &again, &d) == DFGNN_STATUS_SUCCESS && d == 0.0,
             "distance to itself is " + std::to_string(d));
  size_t length = 0;
  FUZZ_CHECK(dfgnnFingerprintBucketKey(&fp, nullptr, 0, &length) == DFGNN_STATUS_SUCCESS && length > 0,
             dfgnnGetLastErrorMessage());
  return 0;
}
