// logging_adaptor: writes a CSV trace of every allocate and deallocate passing through it.
//
//   op,thread,time_ns,ptr,bytes,stream,alignment
//   alloc,1,15320,0x7f3a00000000,4096,0x55d0c0a1b2c0,256
//   free,1,18977,0x7f3a00000000,4096,0x55d0c0a1b2c0,256
//
// op is alloc, free or oom (a refused allocate, ptr 0x0); thread is a small per-process thread
// number; time_ns counts from the adaptor's construction (steady clock).  A free is logged
// before it is forwarded, an alloc after it returns, so the trace order is a valid replay
// order: `strata-bench-e2-gpu --replay trace.csv` replays it against any resource.
//
// Write errors: when writing an alloc line throws (a caller's stream with exceptions() set),
// the allocate fails with that exception after the block has gone back upstream; a free or oom
// line that cannot be written is dropped (the free is still forwarded, the out_of_memory_error
// still thrown); the destructor's flush never throws, so call flush() to learn whether the
// whole trace was written (it throws when any of it was not).
//
// Upstream ownership: a reference; the upstream must outlive the adaptor.  The adaptor owns the
// file it opens, or writes to a caller's stream that must outlive it.
#pragma once

#include <strata/gpu/device_memory_resource.hpp>

#include <chrono>
#include <iosfwd>
#include <memory>
#include <mutex>
#include <string>

namespace strata::gpu {

class logging_adaptor final : public device_memory_resource {
 public:
  logging_adaptor(device_memory_resource& upstream, const std::string& csv_path);  // truncates
  logging_adaptor(device_memory_resource& upstream, std::ostream& out);
  ~logging_adaptor() override;

  device_memory_resource& upstream() const noexcept { return upstream_; }
  // Writes out what is buffered.  Throws std::runtime_error when the trace is incomplete: a
  // line, or this flush, could not be written (a full disk, a closed pipe), so a trace that
  // lost lines is never taken for a whole one.
  void flush();

  static constexpr const char* header = "op,thread,time_ns,ptr,bytes,stream,alignment";

 private:
  void write(const char* op, const void* p, std::size_t bytes, stream_view stream,
             std::size_t alignment);
  void* do_allocate(std::size_t bytes, stream_view stream, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, stream_view stream,
                     std::size_t alignment) noexcept override;
  resource_info do_info() const override { return upstream_.info(); }
  std::string_view do_name() const noexcept override { return "logging"; }

  device_memory_resource& upstream_;
  std::unique_ptr<std::ostream> owned_;
  std::ostream* out_;
  std::string where_;  // for flush()'s error: the file's path, or "the caller's stream"
  std::mutex mutex_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace strata::gpu
