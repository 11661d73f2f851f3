// The one place where exceptions become status codes. Every C entry point body runs inside guard().
#pragma once

#include "db_error.hpp"
#include "error.hpp"

#include <mutex>
#include <new>
#include <string>
#include <unordered_set>

namespace dfgnn {

void set_last_error(const std::string& message);
void clear_last_error();

// The C API status of a tuning database error.
inline dfgnn_status_t db_status(const db::DbError& e) noexcept {
  return e.kind() == db::ErrorKind::InvalidArgument ? DFGNN_STATUS_INVALID_ARGUMENT : DFGNN_STATUS_DATABASE_ERROR;
}

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
    return db_status(e);
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

// The addresses of the live handles of one kind (T: dfgnn_context, dfgnn_graph), so that a
// destroyed or garbage handle is an error instead of a dereference. Handles add themselves when
// constructed and leave when destroyed (handles.hpp). The set is never freed, so handles destroyed
// during static destruction still find it.
template <typename T>
class LiveHandles {
 public:
  static void add(const T* handle) {
    std::lock_guard<std::mutex> lock(state().mutex);
    state().live.insert(handle);
  }
  // Removes handle; false if it was not live. A destroy takes it out first, so two racing
  // destroys of one handle cannot both delete it.
  static bool remove(const void* handle) {
    std::lock_guard<std::mutex> lock(state().mutex);
    return state().live.erase(handle) == 1;
  }
  static bool contains(const void* handle) {
    std::lock_guard<std::mutex> lock(state().mutex);
    return state().live.count(handle) == 1;
  }

 private:
  struct State {
    std::mutex mutex;
    std::unordered_set<const void*> live;
  };
  static State& state() {
    static State* s = new State;
    return *s;
  }
};

[[noreturn]] inline void fail_dead_handle(const char* name) {
  fail(DFGNN_STATUS_INVALID_ARGUMENT, "{} is not a live handle (already destroyed, or not created by dfgnn)", name);
}

// Casts an opaque handle back, rejecting null and handles that are not live, with a message that
// names the argument.
template <typename T, typename H>
T& deref(H handle, const char* name) {
  if (handle == nullptr) fail(DFGNN_STATUS_INVALID_ARGUMENT, "{} is null", name);
  if (!LiveHandles<T>::contains(handle)) fail_dead_handle(name);
  return *reinterpret_cast<T*>(handle);
}

// Destroys a handle made by new: null does nothing, a handle that is not live is an error.
template <typename T, typename H>
void destroy_handle(H handle, const char* name) {
  if (handle == nullptr) return;
  if (!LiveHandles<T>::remove(handle)) fail_dead_handle(name);
  delete reinterpret_cast<T*>(handle);
}

}  // namespace dfgnn
