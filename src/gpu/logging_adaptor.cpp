#include <strata/gpu/logging_adaptor.hpp>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <ostream>
#include <stdexcept>

namespace strata::gpu {
namespace {
unsigned thread_number() {
  static std::atomic<unsigned> next{1};
  thread_local unsigned mine = next.fetch_add(1);
  return mine;
}
}  // namespace

logging_adaptor::logging_adaptor(device_memory_resource& upstream, const std::string& csv_path)
    : device_memory_resource(upstream.shared_backend()),
      upstream_(upstream),
      owned_(std::make_unique<std::ofstream>(csv_path, std::ios::trunc)),
      out_(owned_.get()),
      where_(csv_path),
      start_(std::chrono::steady_clock::now()) {
  if (!*owned_) throw std::runtime_error("logging_adaptor: cannot open " + csv_path);
  *out_ << header << '\n';
}

logging_adaptor::logging_adaptor(device_memory_resource& upstream, std::ostream& out)
    : device_memory_resource(upstream.shared_backend()),
      upstream_(upstream),
      out_(&out),
      where_("the caller's stream"),
      start_(std::chrono::steady_clock::now()) {
  *out_ << header << '\n';
}

// A destructor must not throw: a caller's stream with exceptions() set that fails here would
// otherwise end the program (std::terminate).
logging_adaptor::~logging_adaptor() {
  try {
    flush();
  } catch (...) {
  }
}

void logging_adaptor::flush() {
  std::lock_guard lock(mutex_);
  out_->flush();
  if (!*out_) throw std::runtime_error("logging_adaptor: the trace could not be written whole to " + where_);
}

void logging_adaptor::write(const char* op, const void* p, std::size_t bytes, stream_view stream,
                            std::size_t alignment) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now() - start_).count();
  char line[160];
  const int n = std::snprintf(line, sizeof line, "%s,%u,%lld,0x%llx,%zu,0x%llx,%zu\n", op,
                              thread_number(), static_cast<long long>(ns),
                              static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(p)),
                              bytes, static_cast<unsigned long long>(stream.id()), alignment);
  std::lock_guard lock(mutex_);
  out_->write(line, n);
}

void* logging_adaptor::do_allocate(std::size_t bytes, stream_view stream, std::size_t alignment) {
  void* p;
  try {
    p = upstream_.allocate(bytes, stream, alignment);
  } catch (const std::bad_alloc&) {
    try {
      write("oom", nullptr, bytes, stream, alignment);
    } catch (...) {
      // The caller is told about the out-of-memory, not about the trace.
    }
    throw;
  }
  // A write that throws (a caller's stream with exceptions() set, a full disk, no memory for
  // the stream's buffer) fails the allocate; the block goes back upstream first, so it is not
  // lost, and the trace has no line for it, so a replay stays consistent.
  try {
    write("alloc", p, bytes, stream, alignment);
  } catch (...) {
    upstream_.deallocate(p, bytes, stream, alignment);
    throw;
  }
  return p;
}

void logging_adaptor::do_deallocate(void* p, std::size_t bytes, stream_view stream,
                                    std::size_t alignment) noexcept {
  try {
    write("free", p, bytes, stream, alignment);
  } catch (...) {
  }
  upstream_.deallocate(p, bytes, stream, alignment);
}

}  // namespace strata::gpu
