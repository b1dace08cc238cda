// A small HTTP/1.x request parser for strata-bench-e5-httpd: enough of RFC 9112 for load
// generators (wrk, curl) and for the tests — request line, headers, Content-Length bodies,
// keep-alive rules, pipelining.  It copies the method, target and every header into std::strings
// on purpose: the server is an allocator workload, and a real server's parse allocates too.
#pragma once
#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::e5 {

enum class parse_status {
  complete,    // one request parsed; `consumed` bytes belong to it (headers + body)
  incomplete,  // need more bytes
  bad,         // malformed: answer 400 and close
  too_large,   // header block over the limit: answer 431 and close
  body_too_large,  // Content-Length over the limit: answer 413 and close
  uri_too_long,    // request line over the header-block limit: answer 414 and close
  version_not_supported,  // HTTP-version with a major other than 1: answer 505 and close
  not_implemented,  // a chunked body (Transfer-Encoding): answer 501 and close
};

struct request {
  std::string method, target, version;
  std::vector<std::pair<std::string, std::string>> headers;
  size_t content_length = 0;
  bool keep_alive = true;
  size_t consumed = 0;

  const std::string* header(std::string_view name) const {
    for (auto& h : headers)
      if (h.first.size() == name.size() &&
          strncasecmp(h.first.data(), name.data(), name.size()) == 0)
        return &h.second;
    return nullptr;
  }
};

inline constexpr size_t k_max_header_bytes = 64 * 1024;
inline constexpr size_t k_max_body_bytes = 1 << 20;

// How far parse_request got with a request that is not all there yet, for the next call on the
// same request with more bytes: it resumes there.  Rescanning every byte on every read made a
// request that trickles in cost its size squared (64 KiB of headers a byte at a time: 2 G byte
// visits).  Relative to the request's first byte; start each request with a fresh one.
struct parse_progress {
  size_t scanned = 0;  // the bytes before this hold no header-block end and no bare LF
  size_t need = 0;     // once the header block is complete: the request's length with its body
};

// The methods this server knows (RFC 9110 9.3, and PATCH from RFC 5789): one it does not serve gets
// 405 with Allow, one it does not know at all 501 (RFC 9110 9.1, 15.6.2).  Methods are
// case-sensitive.
inline bool is_known_method(std::string_view m) {
  for (std::string_view k :
       {"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"})
    if (m == k) return true;
  return false;
}

namespace detail {
inline bool is_token_char(char c) {
  // strchr finds the terminating NUL too: "X\0: a" passed as a field name, "G\0T" as a method.
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         (c != '\0' && std::strchr("!#$%&'*+-.^_`|~", c) != nullptr);
}
inline std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}
inline bool has_token(std::string_view list, std::string_view token) {
  while (!list.empty()) {
    size_t comma = list.find(',');
    std::string_view item = trim(list.substr(0, comma));
    if (item.size() == token.size() && strncasecmp(item.data(), token.data(), token.size()) == 0)
      return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

// A byte no request line or field value may hold: a control character other than HTAB (RFC 9110
// 5.5: CR, LF and NUL in a field value are "invalid and dangerous"; RFC 9112 2.2: a bare CR is
// invalid; 3.2: no whitespace or control in a request-target).
inline bool is_forbidden_ctl(char c) {
  return (static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == '\x7f';
}

inline bool is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
// RFC 9110 7.2: Host = uri-host [ ":" port ], uri-host an IP-literal in brackets (checked
// loosely: hex digits, ':', '.', 'v') or a reg-name (unreserved, pct-encoded, sub-delims; RFC 3986
// 3.2.2), port digits.  Empty is valid (a target with no authority).
inline bool is_valid_host(std::string_view h) {
  size_t i = 0;
  if (!h.empty() && h[0] == '[') {
    size_t close = h.find(']');
    if (close == std::string_view::npos) return false;
    for (char c : h.substr(1, close - 1))
      if (!is_hex(c) && c != ':' && c != '.' && c != 'v' && c != 'V') return false;
    i = close + 1;
  } else {
    for (; i < h.size() && h[i] != ':'; ++i) {
      char c = h[i];
      if (c == '%') {
        if (i + 2 >= h.size() || !is_hex(h[i + 1]) || !is_hex(h[i + 2])) return false;
        i += 2;
      } else if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   std::strchr("-._~!$&'()*+,;=", c) != nullptr)) {
        return false;
      }
    }
  }
  if (i == h.size()) return true;
  if (h[i] != ':') return false;
  for (char c : h.substr(i + 1))
    if (c < '0' || c > '9') return false;
  return true;
}
}  // namespace detail

// Parses one request from the front of `in`.  With `progress`, a call that returns incomplete
// records how far it got, and the next call with more bytes of the same request resumes there
// (the first `progress->scanned` bytes must not have changed).
inline parse_status parse_request(std::string_view in, request& req,
                                  parse_progress* progress = nullptr) {
  parse_progress fresh;
  parse_progress& pp = progress ? *progress : fresh;
  if (pp.need > in.size()) return parse_status::incomplete;  // the body is still coming
  // The header-block end may straddle what was scanned and what is new: back up 3 bytes.
  size_t end = in.find("\r\n\r\n", pp.scanned < 3 ? 0 : pp.scanned - 3);
  // A bare LF ends a line for some parsers (RFC 9112 2.2 lets a recipient take it so) and not for
  // this one, which split lines at CRLF only and kept "a\nContent-Length: 22" as one field's value:
  // two parsers then read a different body length from the same bytes (request smuggling).  Refused
  // as soon as it is seen, so a bare-LF request is also answered at once instead of waiting for the
  // client to give up.
  std::string_view scanned = in.substr(0, end == std::string_view::npos ? in.size() : end);
  for (size_t lf = scanned.find('\n', pp.scanned); lf != std::string_view::npos;
       lf = scanned.find('\n', lf + 1))
    if (lf == 0 || scanned[lf - 1] != '\r') return parse_status::bad;
  // RFC 9112 3: a request-target longer than the server will parse MUST get 414, not 431 (which
  // is about header fields): a request line that does not end within the limit.
  auto over_limit = [&] {
    return in.substr(0, k_max_header_bytes).find("\r\n") == std::string_view::npos
               ? parse_status::uri_too_long
               : parse_status::too_large;
  };
  if (end == std::string_view::npos) {
    pp.scanned = in.size();
    return in.size() > k_max_header_bytes ? over_limit() : parse_status::incomplete;
  }
  if (end > k_max_header_bytes) return over_limit();
  std::string_view head = in.substr(0, end);

  size_t eol = head.find("\r\n");
  std::string_view line = head.substr(0, eol);
  size_t sp1 = line.find(' ');
  size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp1 == std::string_view::npos || sp2 == std::string_view::npos || sp1 == 0 ||
      sp2 == sp1 + 1 || line.find(' ', sp2 + 1) != std::string_view::npos)
    return parse_status::bad;
  std::string_view method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1),
                   version = line.substr(sp2 + 1);
  for (char c : method)
    if (!detail::is_token_char(c)) return parse_status::bad;
  for (char c : target)
    if (detail::is_forbidden_ctl(c) || c == '\t') return parse_status::bad;
  // RFC 9112 2.3: HTTP-version = "HTTP/" DIGIT "." DIGIT.  A major version other than 1 (HTTP/2.0,
  // the HTTP/2 preface "PRI * HTTP/2.0") gets 505 (RFC 9110 15.6.6); HTTP/1.x above 1.1 is taken
  // as 1.1 (RFC 9110 2.5: a higher minor version is processed as the highest one implemented) and
  // recorded so.  Both got 400, as if malformed.
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || version[6] != '.' ||
      version[5] < '0' || version[5] > '9' || version[7] < '0' || version[7] > '9')
    return parse_status::bad;
  if (version[5] != '1') return parse_status::version_not_supported;
  req.method.assign(method);
  req.target.assign(target);
  req.version.assign(version[7] == '0' ? "HTTP/1.0" : "HTTP/1.1");
  req.headers.clear();
  req.content_length = 0;

  std::string_view rest = eol == std::string_view::npos ? std::string_view{} : head.substr(eol + 2);
  while (!rest.empty()) {
    size_t e = rest.find("\r\n");
    std::string_view h = rest.substr(0, e);
    rest = e == std::string_view::npos ? std::string_view{} : rest.substr(e + 2);
    size_t colon = h.find(':');
    if (colon == std::string_view::npos || colon == 0) return parse_status::bad;
    std::string_view name = h.substr(0, colon);
    for (char c : name)
      if (!detail::is_token_char(c)) return parse_status::bad;
    for (char c : h.substr(colon + 1))
      if (detail::is_forbidden_ctl(c)) return parse_status::bad;
    req.headers.emplace_back(std::string(name), std::string(detail::trim(h.substr(colon + 1))));
  }

  // Chunked bodies are not supported.  RFC 9112 6.1: a transfer coding the server does not
  // implement SHOULD get 501 (it got 400, as if the request were malformed), but a Transfer-Encoding
  // whose final coding is not chunked, one in an HTTP/1.0 request, or one with Content-Length
  // (RFC 9112 6.3: the message's end is in doubt) is malformed: 400.  Either way the body's end is
  // unknown and the connection is closed.
  if (req.header("Transfer-Encoding")) {
    std::string_view last;
    for (auto& h : req.headers)
      if (strcasecmp(h.first.c_str(), "Transfer-Encoding") == 0) {
        std::string_view v = h.second;
        last = detail::trim(v.substr(v.rfind(',') == std::string_view::npos ? 0 : v.rfind(',') + 1));
      }
    bool chunked_last = last.size() == 7 && strncasecmp(last.data(), "chunked", 7) == 0;
    if (!chunked_last || req.version == "HTTP/1.0" || req.header("Content-Length"))
      return parse_status::bad;
    return parse_status::not_implemented;
  }
  // RFC 9112 3.2: 400 for an HTTP/1.1 request without Host, and for any request with more than
  // one Host line or an invalid value (two servers could pick different hosts from one request).
  const std::string* host = req.header("Host");
  for (auto& h : req.headers)
    if (host && &h.second != host && strcasecmp(h.first.c_str(), "Host") == 0)
      return parse_status::bad;
  if (host ? !detail::is_valid_host(*host) : req.version == "HTTP/1.1") return parse_status::bad;
  // Content-Length given twice with different values: a message whose end the server and a proxy
  // in front of it could read differently (RFC 9112 6.3): refused.  (The first value was used,
  // and the rest of the body was parsed as the next request.)
  const std::string* cl = req.header("Content-Length");
  for (auto& h : req.headers)
    if (cl && &h.second != cl && strcasecmp(h.first.c_str(), "Content-Length") == 0 && h.second != *cl)
      return parse_status::bad;
  if (cl) {
    // RFC 9110 8.6: Content-Length = 1*DIGIT, so leading zeros are valid, and a value of any
    // length over the body limit is too large (413), not malformed: both got 400.
    if (cl->empty()) return parse_status::bad;
    size_t n = 0;
    for (char c : *cl) {
      if (c < '0' || c > '9') return parse_status::bad;
      n = n * 10 + size_t(c - '0');
      if (n > k_max_body_bytes) n = k_max_body_bytes + 1;  // saturates: no wrap-around
    }
    if (n > k_max_body_bytes) return parse_status::body_too_large;
    req.content_length = n;
  }
  const std::string* conn = req.header("Connection");
  if (req.version == "HTTP/1.1")
    req.keep_alive = !(conn && detail::has_token(*conn, "close"));
  else
    req.keep_alive = conn && detail::has_token(*conn, "keep-alive");

  size_t total = end + 4 + req.content_length;
  if (in.size() < total) {
    // Parsed, body still coming: the next calls wait for `need` bytes, then find `end` again.
    pp.scanned = end;
    pp.need = total;
    return parse_status::incomplete;
  }
  req.consumed = total;
  return parse_status::complete;
}

}  // namespace strata::e5
