// strata-bench-e5-httpd: strata's own small epoll HTTP/1.1 server for experiment E5.
//
// N worker threads, each with its own SO_REUSEPORT listening socket and epoll instance, so the
// kernel spreads connections over the workers and no lock is shared between them.  Keep-alive,
// pipelining and Content-Length bodies are handled; every GET/HEAD gets 200 with a body of
// --body-bytes, another of HTTP's methods 405, a method it does not know 501.  The allocator
// matters on purpose: each connection's input buffer, every parsed header, the response buffer and
// --scratch-allocs handler temporaries come from malloc/new, per request, so an LD_PRELOADed
// allocator carries the server's allocation traffic.
//
// Run:   strata-bench-e5-httpd --port 8080 --threads 2 [--max-seconds 600] [--idle-timeout 60]
//        prints {"event":"ready","port":P,...} once listening, and a JSON summary on exit
//        (SIGTERM/SIGINT, or --max-seconds: the server never runs unbounded).
// Smoke: strata-bench-e5-httpd --smoke: serves on an ephemeral loopback port, checks its own
//        answers over real sockets (keep-alive, pipelining, HEAD, 405, 501, 400, Connection: close)
//        and prints {"smoke":"ok",...}.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "args.hpp"
#include "http_request.h"

namespace {

using strata::e5::parse_request;
using strata::e5::parse_status;
using strata::e5::request;

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop.store(true, std::memory_order_relaxed); }

struct options {
  std::string bind = "127.0.0.1";
  int port = 8080;
  int threads = 1;
  size_t body_bytes = 64;
  int scratch_allocs = 4;
  double max_seconds = 600;
  double idle_timeout = 60;  // seconds without a whole request in or a byte of answer out
  bool smoke = false;
};

constexpr const char* kUsage =
    "usage: strata-bench-e5-httpd [--bind ADDR] [--port P (0: any)] [--threads N]\n"
    "         [--body-bytes B] [--scratch-allocs N] [--max-seconds S] [--idle-timeout S] | --smoke";

options parse_options(int argc, char** argv) {
  options o;
  strata::bench::arg_parser args(argc, argv, "strata-bench-e5-httpd", kUsage);
  while (args.next()) {
    if (args.is("--bind")) o.bind = args.value();
    else if (args.is("--port")) o.port = args.value<int>();
    else if (args.is("--threads")) o.threads = args.value<int>();
    else if (args.is("--body-bytes")) o.body_bytes = args.value<size_t>();
    else if (args.is("--scratch-allocs")) o.scratch_allocs = args.value<int>();
    else if (args.is("--max-seconds")) o.max_seconds = args.value<double>();
    else if (args.is("--idle-timeout")) o.idle_timeout = args.value<double>();
    else if (args.is("--smoke")) o.smoke = true;
    else args.unknown();
  }
  if (o.threads < 1 || o.threads > 256) args.fail("--threads out of range 1..256");
  if (o.port < 0 || o.port > 65535) args.fail("--port out of range");
  if (o.body_bytes > (16u << 20)) args.fail("--body-bytes over 16 MiB");
  if (o.scratch_allocs < 0 || o.scratch_allocs > 1000) args.fail("--scratch-allocs out of range");
  // "nan" passed `<= 0` and stopped the server at once after its ready line; "inf" or 1e300
  // overflowed the deadline and the server ran unbounded (session 42's probe).
  if (!std::isfinite(o.max_seconds) || o.max_seconds <= 0 || o.max_seconds > 1e7)
    args.fail("--max-seconds must be in (0, 1e7]");
  if (!std::isfinite(o.idle_timeout) || o.idle_timeout <= 0 || o.idle_timeout > 1e7)
    args.fail("--idle-timeout must be in (0, 1e7]");
  in_addr probe{};
  if (inet_pton(AF_INET, o.bind.c_str(), &probe) != 1)  // was "cannot listen on ::1:0: Success"
    args.fail("--bind wants an IPv4 address, not \"" + o.bind + "\"");
  return o;
}

// ---- server ---------------------------------------------------------------------------------
using clock_type = std::chrono::steady_clock;

struct connection {
  int fd;
  char* in = nullptr;  // malloc'd, grows by realloc
  size_t in_len = 0, in_cap = 0;
  strata::e5::parse_progress progress;  // of the request at the front of `in`
  // Closed when reached: a client that sent nothing, or a header byte now and then (slowloris),
  // or stopped reading its answers, held its connection and descriptor forever.  Pushed back by
  // each whole request taken and each answer byte the client takes, never by request bytes alone.
  clock_type::time_point deadline;
  char* out = nullptr;  // the pending response bytes, malloc'd per response batch
  size_t out_len = 0, out_off = 0;
  bool close_after_write = false;
  // The client shut its side (read gave 0): what it sent is still answered, then the connection
  // is closed.  Closing at once cut the answers a half-closing client was owed (100 pipelined GETs
  // of 64 KiB answers, then shutdown(SHUT_WR): 59 and a half came back).
  bool peer_closed = false;
  uint32_t armed = EPOLLIN | EPOLLRDHUP;  // the epoll events the connection is registered for
  explicit connection(int f) : fd(f) {}
  ~connection() {
    std::free(in);
    std::free(out);
  }
};

struct worker_stats {
  uint64_t requests = 0, connections = 0, bad_requests = 0;
};

int listen_socket(const options& o, int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  if (inet_pton(AF_INET, o.bind.c_str(), &a.sin_addr) != 1 ||
      bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd, 4096) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

int bound_port(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

const char* reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
  }
}

// Appends one response to the connection's pending output (a fresh malloc'd buffer each time the
// previous one was fully written, as a simple server would).  A 405 names the methods served
// (RFC 9110 15.5.6: the server MUST send Allow with it).
void append_response(connection& c, int status, bool keep_alive, size_t body, bool head_only,
                     const std::string& body_bytes) {
  char header[256];
  int n = std::snprintf(header, sizeof header,
                        "HTTP/1.1 %d %s\r\nServer: strata-e5\r\nContent-Type: text/plain\r\n"
                        "Content-Length: %zu\r\nConnection: %s\r\n%s\r\n",
                        status, reason(status), body, keep_alive ? "keep-alive" : "close",
                        status == 405 ? "Allow: GET, HEAD\r\n" : "");
  size_t add = size_t(n) + (head_only ? 0 : body);
  char* grown = static_cast<char*>(std::realloc(c.out, c.out_len + add));
  if (!grown) std::abort();
  c.out = grown;
  std::memcpy(c.out + c.out_len, header, size_t(n));
  if (!head_only) std::memcpy(c.out + c.out_len + n, body_bytes.data(), body);
  c.out_len += add;
}

// Appends bytes that are not a whole response (an interim 100) to the pending output.
void append_bytes(connection& c, const char* bytes, size_t n) {
  char* grown = static_cast<char*>(std::realloc(c.out, c.out_len + n));
  if (!grown) std::abort();
  c.out = grown;
  std::memcpy(c.out + c.out_len, bytes, n);
  c.out_len += n;
}

// Handler temporaries: what an application does per request (format a log line, build a small
// object or two), sized pseudo-randomly in 32 B .. 2 KiB.
uint64_t scratch_work(int count, uint64_t seed) {
  uint64_t sum = 0;
  std::vector<std::unique_ptr<char[]>> keep;
  keep.reserve(size_t(count));
  for (int i = 0; i < count; ++i) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    size_t size = 32 + (seed >> 33) % 2016;
    keep.emplace_back(new char[size]);
    keep.back()[0] = char(i);
    keep.back()[size - 1] = char(size);
    sum += size;
  }
  return sum;
}

// The answers handle_input queues before it stops parsing: the requests after them stay in the
// input buffer until these are written.  Without a bound, one read of pipelined requests was all
// answered at once: 128 KiB of "GET / HTTP/1.1\r\n\r\n" with --body-bytes 65536 queued 470 MB, and
// 512 KiB under a 1 GiB address-space limit made a realloc fail, which aborted the whole server
// (this session's probe).
constexpr size_t k_max_pending_output = 64 * 1024;

// Returns false when the connection must be closed now.  `renewed` is the connection's deadline
// once it has taken a request.
bool handle_input(connection& c, const options& o, const std::string& body_bytes,
                  worker_stats& st, clock_type::time_point renewed) {
  size_t off = 0;
  while (off < c.in_len && !c.close_after_write &&
         c.out_len - c.out_off < k_max_pending_output) {
    request req;
    bool had_header_block = c.progress.need != 0;
    parse_status ps = parse_request(std::string_view(c.in + off, c.in_len - off), req, &c.progress);
    if (ps == parse_status::incomplete) {
      // RFC 9110 10.1.1: a request that expects 100-continue gets an answer as soon as its header
      // block is in, not after its body, which the client holds back meanwhile (curl for 1 s).
      // Nothing was sent, so every such request waited for the client to give up.  HTTP/1.0
      // clients' expectations are ignored, as the RFC says.
      const std::string* expect = req.header("Expect");
      if (!had_header_block && c.progress.need != 0 && req.version == "HTTP/1.1" && expect &&
          strata::e5::detail::has_token(*expect, "100-continue")) {
        static constexpr char k_continue[] = "HTTP/1.1 100 Continue\r\n\r\n";
        append_bytes(c, k_continue, sizeof k_continue - 1);
      }
      break;
    }
    c.progress = {};
    if (ps != parse_status::complete) {
      ++st.bad_requests;
      int status = 400;
      switch (ps) {
        case parse_status::too_large: status = 431; break;
        case parse_status::body_too_large: status = 413; break;
        case parse_status::uri_too_long: status = 414; break;
        case parse_status::version_not_supported: status = 505; break;
        case parse_status::not_implemented: status = 501; break;
        default: break;
      }
      append_response(c, status, false, 0, false, body_bytes);
      c.close_after_write = true;
      off = c.in_len;
      break;
    }
    c.deadline = renewed;
    off += req.consumed;
    ++st.requests;
    scratch_work(o.scratch_allocs, st.requests);
    bool head = req.method == "HEAD";
    if (req.method == "GET" || head) {
      append_response(c, 200, req.keep_alive, o.body_bytes, head, body_bytes);
    } else {
      int status = strata::e5::is_known_method(req.method) ? 405 : 501;
      append_response(c, status, req.keep_alive, 0, false, body_bytes);
    }
    if (!req.keep_alive) c.close_after_write = true;
  }
  if (off > 0) {
    std::memmove(c.in, c.in + off, c.in_len - off);
    c.in_len -= off;
  }
  return true;
}

// Writes pending output; returns false when the connection is finished (closed or failed).
// `renewed`: the connection's deadline once the client has taken a byte.
bool flush_output(connection& c, clock_type::time_point renewed) {
  while (c.out_off < c.out_len) {
    ssize_t w = send(c.fd, c.out + c.out_off, c.out_len - c.out_off, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      if (errno == EINTR) continue;
      return false;
    }
    c.out_off += size_t(w);
    c.deadline = renewed;
  }
  std::free(c.out);
  c.out = nullptr;
  c.out_len = c.out_off = 0;
  return !c.close_after_write;
}

void worker_main(int listen_fd, const options& o, worker_stats& st) {
  int ep = epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;  // nullptr marks the listening socket
  epoll_ctl(ep, EPOLL_CTL_ADD, listen_fd, &ev);
  const std::string body_bytes(o.body_bytes, 'x');
  std::vector<connection*> live;
  epoll_event events[256];
  // Out of descriptors, accept() fails while the listening socket stays readable: epoll_wait
  // returned it at once, again and again (a core at 100 % for as long as the limit was reached,
  // this session's probe).  The socket is left unwatched for 100 ms instead.
  bool accept_paused = false;
  auto accept_resume_at = std::chrono::steady_clock::now();
  auto watch_listener = [&](bool on) {
    epoll_event lev{};
    lev.events = on ? uint32_t(EPOLLIN) : 0u;
    lev.data.ptr = nullptr;
    epoll_ctl(ep, EPOLL_CTL_MOD, listen_fd, &lev);
    accept_paused = !on;
  };
  auto close_conn = [&](connection* c) {
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, nullptr);
    close(c->fd);
    for (auto& p : live)
      if (p == c) {
        p = live.back();
        live.pop_back();
        break;
      }
    delete c;
  };
  const auto idle = std::chrono::duration_cast<clock_type::duration>(
      std::chrono::duration<double>(o.idle_timeout));
  // Expired connections are looked for every min(idle / 4, 1 s) (a pass over `live`), so they
  // are closed that much plus epoll_wait's 100 ms after their deadline at most.
  const auto sweep_every = std::min<clock_type::duration>(idle / 4, std::chrono::seconds(1));
  auto next_sweep = clock_type::now() + sweep_every;
  while (!g_stop.load(std::memory_order_relaxed)) {
    if (accept_paused && std::chrono::steady_clock::now() >= accept_resume_at) watch_listener(true);
    int n = epoll_wait(ep, events, 256, accept_paused ? 20 : 100);  // notices the stop flag promptly
    // One clock read a wake-up: the deadlines need no finer time than that.
    const auto now = clock_type::now();
    const auto renewed = now + idle;
    for (int i = 0; i < n; ++i) {
      if (events[i].data.ptr == nullptr) {
        for (;;) {
          int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
          if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
              watch_listener(false);
              accept_resume_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
            }
            break;
          }
          int one = 1;
          setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          auto* c = new connection(fd);
          c->deadline = renewed;
          epoll_event cev{};
          cev.events = EPOLLIN | EPOLLRDHUP;
          cev.data.ptr = c;
          epoll_ctl(ep, EPOLL_CTL_ADD, fd, &cev);
          live.push_back(c);
          ++st.connections;
        }
        continue;
      }
      auto* c = static_cast<connection*>(events[i].data.ptr);
      bool alive = true;
      if (events[i].events & EPOLLOUT) alive = flush_output(*c, renewed);
      if (alive && !c->peer_closed &&
          (events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))) {
        for (;;) {
          if (c->in_cap - c->in_len < 4096) {
            size_t cap = c->in_cap ? c->in_cap * 2 : 8192;
            char* grown = static_cast<char*>(std::realloc(c->in, cap));
            if (!grown) std::abort();
            c->in = grown;
            c->in_cap = cap;
          }
          ssize_t r = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
          if (r > 0) {
            c->in_len += size_t(r);
            if (c->in_len > strata::e5::k_max_header_bytes + strata::e5::k_max_body_bytes) break;
            continue;
          }
          if (r == 0) c->peer_closed = true;
          else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) alive = false;  // reset
          break;
        }
      }
      // Answer what is buffered while nothing waits to be written, a bounded batch at a time
      // (k_max_pending_output): the requests a batch left are taken up once its answers are out,
      // here, since no EPOLLIN comes for bytes already read.
      while (alive && c->out_len == 0) {
        handle_input(*c, o, body_bytes, st, renewed);
        if (c->out_len == 0) break;
        alive = flush_output(*c, renewed);  // false: failed, or written and the connection ends
      }
      // Shut by the client and all it sent answered (a request cut short by the shutdown never
      // will be): done.
      if (alive && c->peer_closed && c->out_len == 0) alive = false;
      // While answers wait, read nothing more (EPOLLIN off until they are out): a client that
      // pipelined requests and never read its answers grew the server by 10 MB a MiB of requests,
      // without bound (session 40's probe).  Once the client has shut its side, EPOLLRDHUP is off
      // too: it stays ready and would wake the loop again and again.
      const uint32_t want = c->out_len != 0 ? (c->peer_closed ? uint32_t(EPOLLOUT)
                                                              : uint32_t(EPOLLOUT | EPOLLRDHUP))
                                            : uint32_t(EPOLLIN | EPOLLRDHUP);
      if (alive && c->armed != want) {
        c->armed = want;
        epoll_event mev{};
        mev.events = want;
        mev.data.ptr = c;
        epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &mev);
      }
      if (!alive) close_conn(c);
    }
    if (now >= next_sweep) {
      next_sweep = now + sweep_every;
      for (size_t k = live.size(); k-- > 0;) {  // close_conn moves the last entry, already seen, to k
        connection* c = live[k];
        if (c->deadline > now) continue;
        // Part of a request came and the rest did not: say so (RFC 9110 15.5.9) with one
        // non-blocking write before closing.  Not when answers wait unread (they would be cut).
        if (c->in_len > 0 && c->out_len == 0) {
          append_response(*c, 408, false, 0, false, body_bytes);
          c->close_after_write = true;
          flush_output(*c, now);
        }
        close_conn(c);
      }
    }
  }
  while (!live.empty()) close_conn(live.back());
  close(ep);
}

struct server {
  std::vector<int> listen_fds;
  std::vector<worker_stats> stats;
  std::vector<std::thread> threads;
  int port = 0;

  bool start(const options& o) {
    int port0 = o.port;
    for (int t = 0; t < o.threads; ++t) {
      int fd = listen_socket(o, t == 0 ? port0 : port);
      if (fd < 0) {
        std::fprintf(stderr, "strata-bench-e5-httpd: cannot listen on %s:%d: %s\n",
                     o.bind.c_str(), t == 0 ? port0 : port, std::strerror(errno));
        return false;
      }
      if (t == 0) port = bound_port(fd);
      listen_fds.push_back(fd);
    }
    stats.resize(size_t(o.threads));
    for (int t = 0; t < o.threads; ++t)
      threads.emplace_back(worker_main, listen_fds[size_t(t)], std::cref(o),
                           std::ref(stats[size_t(t)]));
    return true;
  }
  void stop() {
    g_stop = true;
    for (auto& t : threads) t.join();
    for (int fd : listen_fds) close(fd);
  }
  worker_stats total() const {
    worker_stats s;
    for (auto& w : stats) {
      s.requests += w.requests;
      s.connections += w.connections;
      s.bad_requests += w.bad_requests;
    }
    return s;
  }
};

long peak_rss_kb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

// ---- smoke client ---------------------------------------------------------------------------
struct client {
  int fd = -1;
  std::string buf;
  bool connect_to(int port) {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    timeval tv{5, 0};  // bounded: a broken server fails the smoke test instead of hanging it
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    return connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  bool send_all(const std::string& s) {
    return send(fd, s.data(), s.size(), MSG_NOSIGNAL) == ssize_t(s.size());
  }
  // Reads one response; returns status (or -1), fills body; `head` = response to HEAD.
  int read_response(std::string& body, bool head, std::string& connection_header) {
    auto fill = [&] {
      char tmp[4096];
      ssize_t r = recv(fd, tmp, sizeof tmp, 0);
      if (r <= 0) return false;
      buf.append(tmp, size_t(r));
      return true;
    };
    size_t end;
    while ((end = buf.find("\r\n\r\n")) == std::string::npos)
      if (!fill()) return -1;
    std::string head_block = buf.substr(0, end);
    int status = 0;
    if (std::sscanf(head_block.c_str(), "HTTP/1.1 %d", &status) != 1) return -1;
    size_t cl = 0;
    size_t p = head_block.find("Content-Length: ");
    if (p != std::string::npos) cl = size_t(std::atoll(head_block.c_str() + p + 16));
    p = head_block.find("Connection: ");
    connection_header =
        p == std::string::npos ? "" : head_block.substr(p + 12, head_block.find("\r\n", p) - p - 12);
    size_t need = end + 4 + (head ? 0 : cl);
    while (buf.size() < need)
      if (!fill()) return -1;
    body = buf.substr(end + 4, need - end - 4);
    buf.erase(0, need);
    return status;
  }
  bool closed_by_peer() {
    char c;
    return buf.empty() && recv(fd, &c, 1, 0) == 0;
  }
  ~client() {
    if (fd >= 0) close(fd);
  }
};

int smoke() {
  options o;
  o.port = 0;
  o.threads = 2;
  o.body_bytes = 100;
  server s;
  if (!s.start(o)) return 1;
  std::vector<std::string> failures;
  auto check = [&](bool ok, const char* what) {
    if (!ok) failures.push_back(what);
  };
  const std::string get = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: smoke\r\n\r\n";
  std::string body, conn;
  {
    client c;
    check(c.connect_to(s.port), "connect");
    for (int i = 0; i < 3; ++i) {  // keep-alive: three requests on one connection
      check(c.send_all(get), "send keep-alive");
      check(c.read_response(body, false, conn) == 200, "keep-alive status 200");
      check(body == std::string(100, 'x'), "keep-alive body");
      check(conn == "keep-alive", "keep-alive header");
    }
    check(c.send_all(get + get + "HEAD /x HTTP/1.1\r\nHost: a\r\n\r\n"), "send pipelined");
    check(c.read_response(body, false, conn) == 200 && body.size() == 100, "pipelined 1");
    check(c.read_response(body, false, conn) == 200 && body.size() == 100, "pipelined 2");
    check(c.read_response(body, true, conn) == 200 && body.empty(), "HEAD");
    check(c.send_all("POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello"), "send POST");
    check(c.read_response(body, false, conn) == 405, "POST -> 405");
    check(c.send_all("FOO / HTTP/1.1\r\nHost: a\r\n\r\n"), "send FOO");
    check(c.read_response(body, false, conn) == 501, "unknown method -> 501");
    check(c.send_all(get), "send after POST");
    check(c.read_response(body, false, conn) == 200, "body consumed: next request 200");
    check(c.send_all("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"), "send close");
    check(c.read_response(body, false, conn) == 200 && conn == "close", "Connection: close");
    check(c.closed_by_peer(), "server closes after Connection: close");
  }
  {
    client c;
    check(c.connect_to(s.port), "connect 2");
    check(c.send_all("NOT-HTTP\r\n\r\n"), "send garbage");
    check(c.read_response(body, false, conn) == 400, "garbage -> 400");
    check(c.closed_by_peer(), "server closes after 400");
  }
  {
    client c;  // HTTP/1.0 without keep-alive closes
    check(c.connect_to(s.port), "connect 3");
    check(c.send_all("GET / HTTP/1.0\r\n\r\n"), "send 1.0");
    check(c.read_response(body, false, conn) == 200 && conn == "close", "HTTP/1.0 close");
  }
  s.stop();
  worker_stats t = s.total();
  // 3 keep-alive + 3 pipelined + POST + FOO + GET + close + HTTP/1.0; the garbage is a bad request.
  check(t.requests == 11 && t.bad_requests == 1, "request counts");
  std::string why;
  for (auto& f : failures) why += (why.empty() ? "" : "; ") + f;
  std::printf("{\"program\":\"strata-bench-e5-httpd\",\"smoke\":\"%s\",\"threads\":%d,"
              "\"requests\":%llu,\"bad_requests\":%llu,\"connections\":%llu,\"failures\":\"%s\"}\n",
              failures.empty() ? "ok" : "failed", o.threads, (unsigned long long)t.requests,
              (unsigned long long)t.bad_requests, (unsigned long long)t.connections, why.c_str());
  return failures.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  options o = parse_options(argc, argv);
  signal(SIGPIPE, SIG_IGN);
  if (o.smoke) return smoke();
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  server s;
  if (!s.start(o)) return 1;
  std::printf("{\"event\":\"ready\",\"port\":%d,\"pid\":%d,\"threads\":%d}\n", s.port,
              int(getpid()), o.threads);
  std::fflush(stdout);
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.max_seconds);
  while (!g_stop.load() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  bool expired = !g_stop.load();
  s.stop();
  worker_stats t = s.total();
  std::printf("{\"program\":\"strata-bench-e5-httpd\",\"threads\":%d,\"requests\":%llu,"
              "\"connections\":%llu,\"bad_requests\":%llu,\"peak_rss_kb\":%ld,\"expired\":%s}\n",
              o.threads, (unsigned long long)t.requests, (unsigned long long)t.connections,
              (unsigned long long)t.bad_requests, peak_rss_kb(), expired ? "true" : "false");
  return 0;
}
