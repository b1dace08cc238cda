// A TEST DOUBLE for the CUDA driver (libcuda.so.1): a test fixture, never installed, never a
// device.  tests/gpu/fake_driver_test.cpp loads it through STRATA_CUDA_LIBRARY so that strata's
// real backend (src/gpu/cuda_backend.cpp, driver.cpp) runs without a GPU.
//
// It implements exactly the entry points src/gpu/driver.cpp binds, with the driver API's
// documented semantics, over host memory and host threads:
//   * device memory is host memory (256-byte aligned), counted against a small total;
//     cuMemAlloc past it returns CUDA_ERROR_OUT_OF_MEMORY, cuMemFree waits for all streams.
//   * every stream runs its operations in order on a host thread of its own; the NULL stream
//     too, as a stream of its own (the legacy stream's implicit synchronisation with blocking
//     streams is not modelled: strata creates non-blocking streams only).  cuStreamDestroy
//     returns at once, the stream's pending work still runs, and the handle value goes to the
//     next stream created (as the driver recycles them); until then calls on the stale handle
//     return CUDA_ERROR_INVALID_HANDLE.  cuStreamGetId is unique for the life of the process.
//   * an event captures the work enqueued on its stream so far; cuStreamWaitEvent holds the
//     waiting stream's later work until then.
//   * a memory pool reuses a freed block at once on the stream that freed it, and on another
//     stream once the free has completed; synchronisation releases free memory above the
//     release threshold.  Blocks are reused whole (no suballocation).
//   * a kernel runs no code: a launch is a stream operation lasting as many nanoseconds as its
//     first 8-byte parameter says (all strata's spin kernel needs).  cuModuleLoadData takes PTX
//     text and knows the .entry names in it.
//   * every call but cuInit, cuDriverGetVersion and cuGetError* needs cuInit first; calls that
//     act on the device need the thread's current context (cuCtxSetCurrent) to be the retained
//     primary context, else CUDA_ERROR_INVALID_CONTEXT.
//
// Switches, read from the environment:
//   STRATA_FAKE_CUDA_INIT_RESULT=code     cuInit returns it (when not 0)
//   STRATA_FAKE_CUDA_DEVICES=n            visible devices (default 1; 0: cuInit says NO_DEVICE)
//   STRATA_FAKE_CUDA_TOTAL_MEMORY=bytes   device memory (default 64 MiB), read at cuInit
//   STRATA_FAKE_CUDA_MEMORY_POOLS=0       the device reports no stream-ordered pool support
//   STRATA_FAKE_CUDA_FAIL=name=code,...   each named entry point returns `code` and does nothing,
//                                         read at every call (the name as bound: cuMemAlloc_v2)
// An older driver lacks entry points, which no variable can hide from dlsym: the library is
// built per driver version (STRATA_FAKE_CUDA_VERSION): 12040 has them all, 11020 lacks
// cuStreamGetId (CUDA 12.0), 11000 lacks the stream-ordered pool calls too (CUDA 11.2).
//
// strata_fake_cuda_live(what) (not a CUDA entry point) counts live objects for the tests:
// "allocations", "device_bytes", "pools", "streams", "events", "modules", "context_refs".
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#ifndef STRATA_FAKE_CUDA_VERSION
#define STRATA_FAKE_CUDA_VERSION 12040
#endif

namespace {

using CUresult = int;
using CUdeviceptr = unsigned long long;

constexpr CUresult SUCCESS = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, NOT_INITIALIZED = 3,
                   INVALID_DEVICE = 101, NO_DEVICE = 100, INVALID_CONTEXT = 201,
                   INVALID_IMAGE = 200, INVALID_HANDLE = 400, NOT_FOUND = 500, NOT_READY = 600;

struct error_text {
  CUresult code;
  const char* name;
  const char* text;
};
constexpr error_text errors[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {35, "CUDA_ERROR_INSUFFICIENT_DRIVER",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {221, "CUDA_ERROR_JIT_COMPILER_NOT_FOUND", "PTX JIT compiler library not found"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {600, "CUDA_ERROR_NOT_READY", "device not ready"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

std::size_t env_size(const char* name, std::size_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 0) : fallback;
}

// STRATA_FAKE_CUDA_FAIL: the code `entry` is told to return, or 0.
CUresult injected(const char* entry) {
  const char* v = std::getenv("STRATA_FAKE_CUDA_FAIL");
  if (!v) return SUCCESS;
  const std::size_t n = std::strlen(entry);
  for (const char* p = v; *p;) {
    const char* end = std::strchr(p, ',');
    if (!end) end = p + std::strlen(p);
    if (static_cast<std::size_t>(end - p) > n && std::strncmp(p, entry, n) == 0 && p[n] == '=')
      return static_cast<CUresult>(std::strtol(p + n + 1, nullptr, 0));
    p = *end ? end + 1 : end;
  }
  return SUCCESS;
}

// ---- streams --------------------------------------------------------------------------------

std::mutex m;                // guards everything below
std::condition_variable cv;  // notified at every completed stream operation

struct stream_obj {
  std::uint64_t id = 0;
  std::deque<std::function<void()>> queue;
  std::uint64_t enqueued = 0, completed = 0;
  bool stopping = false;
  std::thread worker;
};

void run_stream(stream_obj* s) {
  std::unique_lock lock(m);
  for (;;) {
    cv.wait(lock, [&] { return !s->queue.empty() || s->stopping; });
    if (s->queue.empty()) return;
    auto op = std::move(s->queue.front());
    s->queue.pop_front();
    lock.unlock();
    op();
    lock.lock();
    ++s->completed;
    cv.notify_all();
  }
}

struct event_state {
  std::uint64_t recorded = 0, completed = 0;  // generations
};

struct pool_block {
  CUdeviceptr addr;
  std::size_t size;
  std::shared_ptr<stream_obj> freed_on;  // null once the free has completed
  std::shared_ptr<bool> done;
};

struct pool_obj {
  std::size_t threshold = 0, reserved = 0, reserved_high = 0, used = 0, used_high = 0;
  std::map<CUdeviceptr, std::size_t> in_use;
  std::vector<pool_block> free;
  bool destroyed = false;
};

struct state {
  bool initialised = false;
  std::size_t total = 0, device_used = 0;
  std::map<CUdeviceptr, std::size_t> allocations;  // cuMemAlloc
  int context_refs = 0;
  std::uint64_t next_stream_id = 1;
  std::shared_ptr<stream_obj> null_stream;
  std::vector<std::shared_ptr<stream_obj>> streams;  // live and draining (all have a worker)
  std::vector<std::shared_ptr<stream_obj>> draining;
  std::vector<std::unique_ptr<struct stream_handle>> handles;
  std::vector<struct stream_handle*> free_handles;
  std::map<pool_obj*, std::unique_ptr<pool_obj>> pools;
  long events = 0, modules = 0;

  ~state();
};

}  // namespace

struct CUctx_st {
  int unused;
};
struct CUstream_st {};
namespace {
struct stream_handle : CUstream_st {
  std::shared_ptr<stream_obj> live;  // null: destroyed, not yet recycled
};
}  // namespace
struct CUevent_st {
  std::shared_ptr<event_state> ev = std::make_shared<event_state>();
};
struct CUmod_st {
  std::vector<std::string> entries;
};
struct CUfunc_st {
  std::string name;
};
struct CUmemPoolHandle_st {};

namespace {

state g;
CUctx_st primary;
thread_local CUctx_st* t_current = nullptr;

state::~state() {
  // Unload: let every worker finish (they only run what was enqueued).
  std::vector<std::shared_ptr<stream_obj>> all;
  {
    std::lock_guard lock(m);
    for (auto& s : streams) s->stopping = true;
    all = streams;
    cv.notify_all();
  }
  for (auto& s : all)
    if (s->worker.joinable()) s->worker.join();
  for (auto& [p, size] : allocations) std::free(reinterpret_cast<void*>(p));
  for (auto& [h, pool] : pools) {
    for (auto& [p, size] : pool->in_use) std::free(reinterpret_cast<void*>(p));
    for (auto& b : pool->free) std::free(reinterpret_cast<void*>(b.addr));
  }
}

// Callers hold m.
std::shared_ptr<stream_obj> new_stream() {
  auto s = std::make_shared<stream_obj>();
  s->id = g.next_stream_id++;
  s->worker = std::thread(run_stream, s.get());
  g.streams.push_back(s);
  return s;
}

// The stream behind handle h, or null (a destroyed handle).  Callers hold m.
std::shared_ptr<stream_obj> lookup(CUstream_st* h) {
  if (h == nullptr) {
    if (!g.null_stream) g.null_stream = new_stream();
    return g.null_stream;
  }
  return static_cast<stream_handle*>(h)->live;
}

void enqueue(stream_obj& s, std::function<void()> op) {
  s.queue.push_back(std::move(op));
  ++s.enqueued;
  cv.notify_all();
}

void wait_idle(std::unique_lock<std::mutex>& lock, stream_obj& s) {
  const std::uint64_t target = s.enqueued;
  cv.wait(lock, [&] { return s.completed >= target; });
}

void* device_memory(std::size_t bytes) {
  return std::aligned_alloc(256, (bytes + 255) & ~std::size_t{255});
}

// Frees a pool's completed free blocks while more than `keep` bytes are reserved.  Holds m.
void release_pool(pool_obj& p, std::size_t keep) {
  for (auto it = p.free.begin(); it != p.free.end() && p.reserved > keep;) {
    if (*it->done) {
      std::free(reinterpret_cast<void*>(it->addr));
      p.reserved -= it->size;
      g.device_used -= it->size;
      it = p.free.erase(it);
    } else {
      ++it;
    }
  }
}

// After a synchronisation: pools give back free memory above their release threshold.
void synchronised() {
  for (auto& [h, p] : g.pools) release_pool(*p, p->threshold);
}

void synchronise_device(std::unique_lock<std::mutex>& lock) {
  const auto all = g.streams;
  for (auto& s : all) wait_idle(lock, *s);
  synchronised();
}

// Draining streams whose work is done: join their workers.  Holds m (released while joining).
void reap(std::unique_lock<std::mutex>& lock) {
  std::vector<std::shared_ptr<stream_obj>> done;
  for (auto it = g.draining.begin(); it != g.draining.end();) {
    if ((*it)->queue.empty() && (*it)->completed == (*it)->enqueued) {
      done.push_back(*it);
      g.streams.erase(std::find(g.streams.begin(), g.streams.end(), *it));
      it = g.draining.erase(it);
    } else {
      ++it;
    }
  }
  if (done.empty()) return;
  lock.unlock();
  for (auto& s : done) s->worker.join();
  lock.lock();
}

#define FAKE_ENTRY(name)                            \
  if (CUresult r = injected(#name); r != SUCCESS) \
    return r;                                       \
  std::unique_lock lock(m);                         \
  if (!g.initialised) return NOT_INITIALIZED
#define FAKE_CONTEXT()                                                        \
  if (t_current != &primary || g.context_refs == 0) return INVALID_CONTEXT

}  // namespace

extern "C" {

__attribute__((visibility("default"))) long strata_fake_cuda_live(const char* what) {
  std::lock_guard lock(m);
  const std::string w = what;
  if (w == "allocations") {
    std::size_t n = g.allocations.size();
    for (auto& [h, p] : g.pools) n += p->in_use.size();
    return static_cast<long>(n);
  }
  if (w == "device_bytes") return static_cast<long>(g.device_used);
  if (w == "pools") {
    long n = 0;
    for (auto& [h, p] : g.pools) n += !p->destroyed;
    return n;
  }
  if (w == "streams") {
    long n = 0;
    for (auto& h : g.handles) n += h->live != nullptr;
    return n;
  }
  if (w == "events") return g.events;
  if (w == "modules") return g.modules;
  if (w == "context_refs") return g.context_refs;
  return -1;
}

CUresult cuInit(unsigned flags) {
  if (CUresult r = injected("cuInit"); r != SUCCESS) return r;
  if (const char* v = std::getenv("STRATA_FAKE_CUDA_INIT_RESULT"); v && std::atoi(v) != 0)
    return std::atoi(v);
  if (flags != 0) return INVALID_VALUE;
  if (env_size("STRATA_FAKE_CUDA_DEVICES", 1) == 0) return NO_DEVICE;
  std::lock_guard lock(m);
  if (!g.initialised) g.total = env_size("STRATA_FAKE_CUDA_TOTAL_MEMORY", std::size_t{64} << 20);
  g.initialised = true;
  return SUCCESS;
}

CUresult cuDriverGetVersion(int* version) {
  if (CUresult r = injected("cuDriverGetVersion"); r != SUCCESS) return r;
  if (!version) return INVALID_VALUE;
  *version = STRATA_FAKE_CUDA_VERSION;
  return SUCCESS;
}

CUresult cuDeviceGetCount(int* count) {
  FAKE_ENTRY(cuDeviceGetCount);
  if (!count) return INVALID_VALUE;
  *count = static_cast<int>(env_size("STRATA_FAKE_CUDA_DEVICES", 1));
  return SUCCESS;
}

CUresult cuDeviceGet(int* device, int ordinal) {
  FAKE_ENTRY(cuDeviceGet);
  if (!device) return INVALID_VALUE;
  if (ordinal < 0 || static_cast<std::size_t>(ordinal) >= env_size("STRATA_FAKE_CUDA_DEVICES", 1))
    return INVALID_DEVICE;
  *device = ordinal;
  return SUCCESS;
}

CUresult cuDeviceGetName(char* name, int len, int device) {
  FAKE_ENTRY(cuDeviceGetName);
  if (!name || len <= 0) return INVALID_VALUE;
  if (device != 0) return INVALID_DEVICE;
  std::snprintf(name, static_cast<std::size_t>(len), "%s", "strata fake CUDA device");
  return SUCCESS;
}

CUresult cuDeviceGetAttribute(int* value, int attribute, int device) {
  FAKE_ENTRY(cuDeviceGetAttribute);
  if (!value) return INVALID_VALUE;
  if (device != 0) return INVALID_DEVICE;
  if (attribute == 115 && STRATA_FAKE_CUDA_VERSION >= 11020) {  // MEMORY_POOLS_SUPPORTED
    *value = env_size("STRATA_FAKE_CUDA_MEMORY_POOLS", 1) != 0;
    return SUCCESS;
  }
  return INVALID_VALUE;  // an attribute this driver (or the fake) does not know
}

CUresult cuDevicePrimaryCtxRetain(CUctx_st** ctx, int device) {
  FAKE_ENTRY(cuDevicePrimaryCtxRetain);
  if (!ctx) return INVALID_VALUE;
  if (device != 0) return INVALID_DEVICE;
  ++g.context_refs;
  *ctx = &primary;
  return SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(int device) {
  FAKE_ENTRY(cuDevicePrimaryCtxRelease_v2);
  if (device != 0) return INVALID_DEVICE;
  if (g.context_refs == 0) return INVALID_CONTEXT;  // "already inactive"
  --g.context_refs;
  return SUCCESS;
}

CUresult cuCtxSetCurrent(CUctx_st* ctx) {
  FAKE_ENTRY(cuCtxSetCurrent);
  if (ctx != nullptr && ctx != &primary) return INVALID_CONTEXT;
  t_current = ctx;
  return SUCCESS;
}

CUresult cuCtxGetCurrent(CUctx_st** ctx) {
  FAKE_ENTRY(cuCtxGetCurrent);
  if (!ctx) return INVALID_VALUE;
  *ctx = t_current;
  return SUCCESS;
}

CUresult cuCtxSynchronize() {
  FAKE_ENTRY(cuCtxSynchronize);
  FAKE_CONTEXT();
  synchronise_device(lock);
  reap(lock);
  return SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr* p, std::size_t bytes) {
  FAKE_ENTRY(cuMemAlloc_v2);
  FAKE_CONTEXT();
  if (!p || bytes == 0) return INVALID_VALUE;
  if (bytes > g.total - g.device_used) return OUT_OF_MEMORY;
  void* mem = device_memory(bytes);
  if (!mem) return OUT_OF_MEMORY;
  *p = reinterpret_cast<std::uintptr_t>(mem);
  g.allocations[*p] = bytes;
  g.device_used += bytes;
  return SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr p) {
  FAKE_ENTRY(cuMemFree_v2);
  FAKE_CONTEXT();
  if (p == 0) return SUCCESS;
  auto it = g.allocations.find(p);
  if (it == g.allocations.end()) return INVALID_VALUE;
  synchronise_device(lock);  // cuMemFree waits for the device's outstanding work
  it = g.allocations.find(p);
  if (it == g.allocations.end()) return INVALID_VALUE;  // freed meanwhile by another thread
  g.device_used -= it->second;
  g.allocations.erase(it);
  std::free(reinterpret_cast<void*>(p));
  return SUCCESS;
}

CUresult cuMemGetInfo_v2(std::size_t* free_bytes, std::size_t* total) {
  FAKE_ENTRY(cuMemGetInfo_v2);
  FAKE_CONTEXT();
  if (!free_bytes || !total) return INVALID_VALUE;
  *free_bytes = g.total - g.device_used;
  *total = g.total;
  return SUCCESS;
}

// ---- streams and events ---------------------------------------------------------------------

CUresult cuStreamCreateWithPriority(CUstream_st** out, unsigned flags, int) {
  FAKE_ENTRY(cuStreamCreateWithPriority);
  FAKE_CONTEXT();
  if (!out || flags > 1) return INVALID_VALUE;
  reap(lock);
  stream_handle* h;
  if (!g.free_handles.empty()) {  // the driver hands a destroyed stream's handle out again
    h = g.free_handles.back();
    g.free_handles.pop_back();
  } else {
    g.handles.push_back(std::make_unique<stream_handle>());
    h = g.handles.back().get();
  }
  h->live = new_stream();
  *out = h;
  return SUCCESS;
}

CUresult cuStreamDestroy_v2(CUstream_st* h) {
  FAKE_ENTRY(cuStreamDestroy_v2);
  FAKE_CONTEXT();
  if (h == nullptr) return INVALID_HANDLE;
  auto* sh = static_cast<stream_handle*>(h);
  if (!sh->live) return INVALID_HANDLE;
  sh->live->stopping = true;  // its pending work still runs
  g.draining.push_back(std::move(sh->live));
  sh->live = nullptr;
  g.free_handles.push_back(sh);
  cv.notify_all();
  return SUCCESS;
}

CUresult cuStreamSynchronize(CUstream_st* h) {
  FAKE_ENTRY(cuStreamSynchronize);
  FAKE_CONTEXT();
  auto s = lookup(h);
  if (!s) return INVALID_HANDLE;
  wait_idle(lock, *s);
  synchronised();
  return SUCCESS;
}

#if STRATA_FAKE_CUDA_VERSION >= 12000
CUresult cuStreamGetId(CUstream_st* h, unsigned long long* id) {
  FAKE_ENTRY(cuStreamGetId);
  FAKE_CONTEXT();
  if (!id) return INVALID_VALUE;
  auto s = lookup(h);
  if (!s) return INVALID_HANDLE;
  *id = s->id;
  return SUCCESS;
}
#endif

CUresult cuEventCreate(CUevent_st** out, unsigned flags) {
  FAKE_ENTRY(cuEventCreate);
  FAKE_CONTEXT();
  if (!out || flags > 0xf) return INVALID_VALUE;
  *out = new CUevent_st;
  ++g.events;
  return SUCCESS;
}

CUresult cuEventDestroy_v2(CUevent_st* e) {
  FAKE_ENTRY(cuEventDestroy_v2);
  FAKE_CONTEXT();
  if (!e) return INVALID_HANDLE;
  delete e;  // pending records keep the state alive and complete into it
  --g.events;
  return SUCCESS;
}

CUresult cuEventRecord(CUevent_st* e, CUstream_st* h) {
  FAKE_ENTRY(cuEventRecord);
  FAKE_CONTEXT();
  if (!e) return INVALID_HANDLE;
  auto s = lookup(h);
  if (!s) return INVALID_HANDLE;
  const std::uint64_t gen = ++e->ev->recorded;
  enqueue(*s, [ev = e->ev, gen] {
    std::lock_guard l(m);
    ev->completed = std::max(ev->completed, gen);
  });
  return SUCCESS;
}

CUresult cuEventQuery(CUevent_st* e) {
  FAKE_ENTRY(cuEventQuery);
  FAKE_CONTEXT();
  if (!e) return INVALID_HANDLE;
  return e->ev->completed >= e->ev->recorded ? SUCCESS : NOT_READY;
}

CUresult cuEventSynchronize(CUevent_st* e) {
  FAKE_ENTRY(cuEventSynchronize);
  FAKE_CONTEXT();
  if (!e) return INVALID_HANDLE;
  auto ev = e->ev;
  const std::uint64_t gen = ev->recorded;
  cv.wait(lock, [&] { return ev->completed >= gen; });
  synchronised();
  return SUCCESS;
}

CUresult cuStreamWaitEvent(CUstream_st* h, CUevent_st* e, unsigned flags) {
  FAKE_ENTRY(cuStreamWaitEvent);
  FAKE_CONTEXT();
  if (!e || flags > 1) return flags > 1 ? INVALID_VALUE : INVALID_HANDLE;
  auto s = lookup(h);
  if (!s) return INVALID_HANDLE;
  const std::uint64_t gen = e->ev->recorded;
  enqueue(*s, [ev = e->ev, gen] {
    std::unique_lock l(m);
    cv.wait(l, [&] { return ev->completed >= gen; });
  });
  return SUCCESS;
}

// ---- modules and kernels --------------------------------------------------------------------

CUresult cuModuleLoadData(CUmod_st** out, const void* image) {
  FAKE_ENTRY(cuModuleLoadData);
  FAKE_CONTEXT();
  if (!out || !image) return INVALID_VALUE;
  const std::string ptx = static_cast<const char*>(image);
  if (ptx.find(".version") == std::string::npos) return INVALID_IMAGE;
  auto mod = std::make_unique<CUmod_st>();
  for (std::size_t at = ptx.find(".entry "); at != std::string::npos;
       at = ptx.find(".entry ", at + 1)) {
    const std::size_t start = at + 7, end = ptx.find_first_of("( \n", start);
    mod->entries.push_back(ptx.substr(start, end - start));
  }
  *out = mod.release();
  ++g.modules;
  return SUCCESS;
}

CUresult cuModuleUnload(CUmod_st* mod) {
  FAKE_ENTRY(cuModuleUnload);
  FAKE_CONTEXT();
  if (!mod) return INVALID_HANDLE;
  delete mod;
  --g.modules;
  return SUCCESS;
}

CUresult cuModuleGetFunction(CUfunc_st** out, CUmod_st* mod, const char* name) {
  FAKE_ENTRY(cuModuleGetFunction);
  FAKE_CONTEXT();
  if (!out || !mod || !name) return INVALID_VALUE;
  if (std::find(mod->entries.begin(), mod->entries.end(), name) == mod->entries.end())
    return NOT_FOUND;
  static std::map<std::string, CUfunc_st> functions;  // live as long as the library
  auto& f = functions[name];
  f.name = name;
  *out = &f;
  return SUCCESS;
}

CUresult cuLaunchKernel(CUfunc_st* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned, CUstream_st* h, void** params,
                        void** extra) {
  FAKE_ENTRY(cuLaunchKernel);
  FAKE_CONTEXT();
  if (!f) return INVALID_HANDLE;
  if (!gx || !gy || !gz || !bx || !by || !bz || extra) return INVALID_VALUE;
  auto s = lookup(h);
  if (!s) return INVALID_HANDLE;
  std::uint64_t ns = 0;
  if (params && params[0]) std::memcpy(&ns, params[0], sizeof ns);  // copied at launch
  enqueue(*s, [ns] { std::this_thread::sleep_for(std::chrono::nanoseconds(ns)); });
  return SUCCESS;
}

// ---- stream-ordered memory pools (CUDA 11.2) ------------------------------------------------

#if STRATA_FAKE_CUDA_VERSION >= 11020
struct mem_pool_props {
  int allocType, handleTypes;
  int location_type, location_id;
  void* win32;
  std::size_t maxSize;
  unsigned short usage;
  unsigned char reserved[54];
};

CUresult cuMemPoolCreate(CUmemPoolHandle_st** out, const mem_pool_props* props) {
  FAKE_ENTRY(cuMemPoolCreate);
  FAKE_CONTEXT();
  if (!out || !props) return INVALID_VALUE;
  if (props->allocType != 1 || props->location_type != 1) return INVALID_VALUE;
  if (props->location_id != 0) return INVALID_DEVICE;
  if (env_size("STRATA_FAKE_CUDA_MEMORY_POOLS", 1) == 0) return 801;  // NOT_SUPPORTED
  auto p = std::make_unique<pool_obj>();
  auto* h = reinterpret_cast<CUmemPoolHandle_st*>(p.get());
  g.pools[p.get()] = std::move(p);
  *out = h;
  return SUCCESS;
}

pool_obj* find_pool(CUmemPoolHandle_st* h) {  // holds m
  auto it = g.pools.find(reinterpret_cast<pool_obj*>(h));
  return it == g.pools.end() || it->second->destroyed ? nullptr : it->second.get();
}

CUresult cuMemPoolDestroy(CUmemPoolHandle_st* h) {
  FAKE_ENTRY(cuMemPoolDestroy);
  FAKE_CONTEXT();
  pool_obj* p = find_pool(h);
  if (!p) return INVALID_VALUE;
  // Returns at once; what is still allocated or being freed goes at the next synchronisation
  // after it is freed (the fake keeps the pool's record until unload).
  p->destroyed = true;
  p->threshold = 0;
  release_pool(*p, 0);
  return SUCCESS;
}

CUresult cuMemPoolSetAttribute(CUmemPoolHandle_st* h, int attr, void* value) {
  FAKE_ENTRY(cuMemPoolSetAttribute);
  FAKE_CONTEXT();
  pool_obj* p = find_pool(h);
  if (!p || !value) return INVALID_VALUE;
  const auto v = *static_cast<unsigned long long*>(value);
  switch (attr) {
    case 4: p->threshold = v; return SUCCESS;
    case 6: if (v) return INVALID_VALUE; p->reserved_high = p->reserved; return SUCCESS;
    case 8: if (v) return INVALID_VALUE; p->used_high = p->used; return SUCCESS;
    default: return INVALID_VALUE;
  }
}

CUresult cuMemPoolGetAttribute(CUmemPoolHandle_st* h, int attr, void* value) {
  FAKE_ENTRY(cuMemPoolGetAttribute);
  FAKE_CONTEXT();
  pool_obj* p = find_pool(h);
  if (!p || !value) return INVALID_VALUE;
  auto* v = static_cast<unsigned long long*>(value);
  switch (attr) {
    case 4: *v = p->threshold; return SUCCESS;
    case 5: *v = p->reserved; return SUCCESS;
    case 6: *v = p->reserved_high; return SUCCESS;
    case 7: *v = p->used; return SUCCESS;
    case 8: *v = p->used_high; return SUCCESS;
    default: return INVALID_VALUE;
  }
}

CUresult cuMemPoolTrimTo(CUmemPoolHandle_st* h, std::size_t keep) {
  FAKE_ENTRY(cuMemPoolTrimTo);
  FAKE_CONTEXT();
  pool_obj* p = find_pool(h);
  if (!p) return INVALID_VALUE;
  release_pool(*p, keep);
  return SUCCESS;
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr* out, std::size_t bytes, CUmemPoolHandle_st* h,
                                 CUstream_st* sh) {
  FAKE_ENTRY(cuMemAllocFromPoolAsync);
  FAKE_CONTEXT();
  pool_obj* p = find_pool(h);
  if (!out || !p || bytes == 0) return INVALID_VALUE;
  auto s = lookup(sh);
  if (!s) return INVALID_HANDLE;
  // Reuse: a block whose free completed, or one freed on this same stream (stream order).
  for (auto it = p->free.begin(); it != p->free.end(); ++it) {
    if (it->size >= bytes && (*it->done || it->freed_on == s)) {
      *out = it->addr;
      p->in_use[it->addr] = it->size;
      p->used += it->size;
      p->used_high = std::max(p->used_high, p->used);
      p->free.erase(it);
      return SUCCESS;
    }
  }
  const std::size_t size = (bytes + 255) & ~std::size_t{255};
  if (size > g.total - g.device_used) release_pool(*p, 0);
  if (size > g.total - g.device_used) return OUT_OF_MEMORY;
  void* mem = device_memory(size);
  if (!mem) return OUT_OF_MEMORY;
  *out = reinterpret_cast<std::uintptr_t>(mem);
  g.device_used += size;
  p->reserved += size;
  p->reserved_high = std::max(p->reserved_high, p->reserved);
  p->in_use[*out] = size;
  p->used += size;
  p->used_high = std::max(p->used_high, p->used);
  return SUCCESS;
}

CUresult cuMemFreeAsync(CUdeviceptr ptr, CUstream_st* sh) {
  FAKE_ENTRY(cuMemFreeAsync);
  FAKE_CONTEXT();
  auto s = lookup(sh);
  if (!s) return INVALID_HANDLE;
  for (auto& [key, p] : g.pools) {
    auto it = p->in_use.find(ptr);
    if (it == p->in_use.end()) continue;
    auto done = std::make_shared<bool>(false);
    p->free.push_back({ptr, it->second, s, done});
    p->used -= it->second;
    p->in_use.erase(it);
    enqueue(*s, [done, pool = p.get()] {
      std::lock_guard l(m);
      *done = true;
      for (auto& b : pool->free)
        if (b.done == done) b.freed_on = nullptr;
    });
    return SUCCESS;
  }
  return INVALID_VALUE;
}
#endif

// ---- errors ---------------------------------------------------------------------------------

CUresult cuGetErrorName(CUresult r, const char** out) {
  if (!out) return INVALID_VALUE;
  for (const auto& e : errors)
    if (e.code == r) return *out = e.name, SUCCESS;
  *out = nullptr;
  return INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult r, const char** out) {
  if (!out) return INVALID_VALUE;
  for (const auto& e : errors)
    if (e.code == r) return *out = e.text, SUCCESS;
  *out = nullptr;
  return INVALID_VALUE;
}

}  // extern "C"
