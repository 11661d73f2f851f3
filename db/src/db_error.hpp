// The tuning database's own error type: what kind of failure it is (callers and the database
// itself branch on the kind, never on message text). db/ includes no runtime header, the public C
// header neither: the runtime's C boundary (api_guard.hpp, db_status) maps a kind to its status
// (INVALID_ARGUMENT for a malformed argument, DATABASE_ERROR for every other kind).
#pragma once

#include <stdexcept>
#include <string>

namespace dfgnn::db {

enum class ErrorKind {
  Other,            // anything else (the message says what)
  InvalidArgument,  // a malformed argument (status INVALID_ARGUMENT)
  Busy,             // the lock stayed busy past the timeout and retries
  DiskFull,         // no space left on the device (or the quota is used up)
  ReadOnly,         // the file or its filesystem does not allow writing
  Corrupt,          // SQLite found damaged pages or a truncated file
  NotADatabase,     // the file is not an SQLite database (garbage, wrong format)
  Foreign,          // an SQLite database, but not dfgnn's
  NewerSchema,      // dfgnn's, with a schema newer than this build supports
  Schema,           // dfgnn's, but its schema objects differ from what dfgnn creates
  Io,               // another I/O error
};

// "disk full", "read-only", ...: a few words for messages.
const char* error_kind_name(ErrorKind kind);

class DbError : public std::runtime_error {
 public:
  DbError(ErrorKind kind, const std::string& message, int sqlite_code = 0)
      : std::runtime_error(message), kind_(kind), sqlite_code_(sqlite_code) {}
  ErrorKind kind() const noexcept { return kind_; }
  int sqlite_code() const noexcept { return sqlite_code_; }  // extended result code, 0 if none

 private:
  ErrorKind kind_;
  int sqlite_code_;
};

}  // namespace dfgnn::db
