// The one place where exceptions become status codes. Every C entry point body runs inside guard().
#pragma once

#include "db_error.hpp"
#include "error.hpp"

#include <new>
#include <string>

namespace dfgnn {

void set_last_error(const std::string& message);
void clear_last_error();

template <typename F>
dfgnn_status_t guard(F&& body) noexcept {
  try {
    body();
    return DFGNN_STATUS_SUCCESS;
  } catch (const Error& e) {
    set_last_error(e.what());
    return e.status();
  } catch (const db::DbError& e) {  // the tuning database's own error type
    set_last_error(e.what());
    return e.status();
  } catch (const std::bad_alloc&) {
    set_last_error("out of host memory");
    return DFGNN_STATUS_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_last_error(std::string("internal error: ") + e.what());
    return DFGNN_STATUS_INTERNAL_ERROR;
  } catch (...) {
    set_last_error("internal error: unknown exception");
    return DFGNN_STATUS_INTERNAL_ERROR;
  }
}

// Casts an opaque handle back, rejecting null with a message that names the argument.
template <typename T, typename H>
T& deref(H handle, const char* name) {
  if (handle == nullptr) fail(DFGNN_STATUS_INVALID_ARGUMENT, "{} is null", name);
  return *reinterpret_cast<T*>(handle);
}

}  // namespace dfgnn
