// The E5 server's request parser: complete, incomplete, pipelined, bodies, keep-alive rules and
// malformed input.
#include "http_request.h"

#include <gtest/gtest.h>

#include <string>

using strata::e5::parse_request;
using strata::e5::parse_status;
using strata::e5::request;

TEST(E5HttpRequest, ParsesAGetWithHeaders) {
  request r;
  std::string in = "GET /a?b=c HTTP/1.1\r\nHost: x\r\nUser-Agent:  wrk \r\n\r\n";
  ASSERT_EQ(parse_request(in, r), parse_status::complete);
  EXPECT_EQ(r.method, "GET");
  EXPECT_EQ(r.target, "/a?b=c");
  EXPECT_EQ(r.version, "HTTP/1.1");
  ASSERT_NE(r.header("user-agent"), nullptr);  // names are case-insensitive, values trimmed
  EXPECT_EQ(*r.header("user-agent"), "wrk");
  EXPECT_TRUE(r.keep_alive);
  EXPECT_EQ(r.consumed, in.size());
}

TEST(E5HttpRequest, IncompleteUntilTheHeaderBlockAndBodyArrive) {
  request r;
  std::string in = "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\nab";
  for (size_t n = 0; n < in.size(); ++n)
    EXPECT_EQ(parse_request(std::string_view(in).substr(0, n), r), parse_status::incomplete) << n;
  EXPECT_EQ(parse_request(in, r), parse_status::incomplete);
  in += "cd";
  ASSERT_EQ(parse_request(in, r), parse_status::complete);
  EXPECT_EQ(r.content_length, 4u);
  EXPECT_EQ(r.consumed, in.size());
}

TEST(E5HttpRequest, PipelinedRequestsAreConsumedOneByOne) {
  std::string in =
      "GET /1 HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
  request r;
  ASSERT_EQ(parse_request(in, r), parse_status::complete);
  EXPECT_EQ(r.target, "/1");
  std::string_view rest = std::string_view(in).substr(r.consumed);
  ASSERT_EQ(parse_request(rest, r), parse_status::complete);
  EXPECT_EQ(r.target, "/2");
  EXPECT_FALSE(r.keep_alive);
  EXPECT_EQ(r.consumed, rest.size());
}

TEST(E5HttpRequest, KeepAliveRulesOfHttp10And11) {
  request r;
  ASSERT_EQ(parse_request("GET / HTTP/1.0\r\n\r\n", r), parse_status::complete);
  EXPECT_FALSE(r.keep_alive);
  ASSERT_EQ(parse_request("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", r), parse_status::complete);
  EXPECT_TRUE(r.keep_alive);
  ASSERT_EQ(parse_request("GET / HTTP/1.1\r\nHost: a\r\nConnection: foo, close\r\n\r\n", r),
            parse_status::complete);
  EXPECT_FALSE(r.keep_alive);
}

TEST(E5HttpRequest, MalformedInputIsRejected) {
  request r;
  for (const char* bad : {"NOT-HTTP\r\n\r\n", "GET /\r\n\r\n", "GET / HTTP/1.10\r\n\r\n",
                          "GET / HTTP/1\r\n\r\n", "GET / http/1.1\r\n\r\n", "GET / HTTP/x.1\r\n\r\n",
                          "GET  / HTTP/1.1\r\n\r\n", "G(T / HTTP/1.1\r\n\r\n",
                          "GET / HTTP/1.1\r\nHost: a\r\nNoColon\r\n\r\n",
                          "GET / HTTP/1.1\r\nHost: a\r\n: v\r\n\r\n",
                          "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1x\r\n\r\n",
                          "GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n"})
    EXPECT_EQ(parse_request(bad, r), parse_status::bad) << bad;
}

// Helper H8's probe: strchr(set, c) finds the set's terminating NUL, so a NUL passed as a token
// character: "X\0: a" was a field name (200) and "G\0T" a method (501) where RFC 9110 5.1 and
// 9.1 allow only tchar: 400.
TEST(E5HttpRequest, NulIsNotATokenCharacter) {
  using namespace std::string_literals;
  request r;
  EXPECT_EQ(parse_request("GET / HTTP/1.1\r\nHost: a\r\nX\0: a\r\n\r\n"s, r), parse_status::bad);
  EXPECT_EQ(parse_request("G\0T / HTTP/1.1\r\nHost: a\r\n\r\n"s, r), parse_status::bad);
  EXPECT_FALSE(strata::e5::detail::is_token_char('\0'));
}

// Helper H8's probe: Content-Length = 1*DIGIT (RFC 9110 8.6), but more than 9 digits was refused
// as malformed, so "0000000005" got 400 and a value over the body limit written with 10 digits or
// more got 400 where every shorter one got 413.  A value past 2^64 must not wrap to a small one.
TEST(E5HttpRequest, ContentLengthWithLeadingZerosOrManyDigits) {
  request r;
  ASSERT_EQ(parse_request("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0000000000005\r\n\r\n"
                          "hello", r),
            parse_status::complete);
  EXPECT_EQ(r.content_length, 5u);
  for (const char* huge : {"1000000000", "99999999999999999999999", "18446744073709551621"})
    EXPECT_EQ(parse_request("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: " + std::string(huge) +
                                "\r\n\r\nhello", r),
              parse_status::body_too_large)
        << huge;
  for (const char* bad : {"+5", "-1", "5, 5", " ", "0x5"})
    EXPECT_EQ(parse_request("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: " + std::string(bad) +
                                "\r\n\r\nhello", r),
              parse_status::bad)
        << bad;
}

// Helper H8's probe: a request line that does not end within the header-block limit got 431,
// which is about header fields; RFC 9112 3 says a request-target too long to parse MUST get 414.
// Header fields over the limit after a short request line stay 431.
TEST(E5HttpRequest, RequestLineOverTheLimitIsUriTooLong) {
  request r;
  const std::string line = "GET /" + std::string(strata::e5::k_max_header_bytes, 'a');
  EXPECT_EQ(parse_request(line, r), parse_status::uri_too_long);
  EXPECT_EQ(parse_request(line + " HTTP/1.1\r\nHost: a\r\n\r\n", r), parse_status::uri_too_long);
  const std::string fields = "GET / HTTP/1.1\r\nX: " + std::string(strata::e5::k_max_header_bytes, 'a');
  EXPECT_EQ(parse_request(fields, r), parse_status::too_large);
  EXPECT_EQ(parse_request(fields + "\r\n\r\n", r), parse_status::too_large);
}

// Helper H8's probe: any version but "HTTP/1.0" and "HTTP/1.1" was malformed (400).  A major
// version the server does not implement gets 505 (RFC 9110 15.6.6), the HTTP/2 preface included;
// HTTP/1.2 is processed as HTTP/1.1 (RFC 9110 2.5), Host and keep-alive rules included.
TEST(E5HttpRequest, OtherVersionsAre505OrTheHighestMinor) {
  request r;
  for (const char* v : {"GET / HTTP/2.0\r\nHost: a\r\n\r\n", "GET / HTTP/3.0\r\n\r\n",
                        "GET / HTTP/0.9\r\n\r\n", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"})
    EXPECT_EQ(parse_request(v, r), parse_status::version_not_supported) << v;
  ASSERT_EQ(parse_request("GET / HTTP/1.2\r\nHost: a\r\n\r\n", r), parse_status::complete);
  EXPECT_EQ(r.version, "HTTP/1.1");
  EXPECT_TRUE(r.keep_alive);
  EXPECT_EQ(parse_request("GET / HTTP/1.9\r\n\r\n", r), parse_status::bad);  // no Host
}

// Helper H8's probe: every Transfer-Encoding got 400, as if malformed.  This server does not
// decode chunked bodies: a request whose final coding is chunked gets 501 (RFC 9112 6.1), one
// whose final coding is not chunked, or with Content-Length too (RFC 9112 6.3), or in HTTP/1.0,
// stays 400.
TEST(E5HttpRequest, ChunkedBodiesAreNotImplementedOtherCodingsMalformed) {
  request r;
  for (const char* te : {"chunked", "Chunked", "gzip, chunked"})
    EXPECT_EQ(parse_request("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: " + std::string(te) +
                                "\r\n\r\n5\r\nhello\r\n0\r\n\r\n", r),
              parse_status::not_implemented)
        << te;
  EXPECT_EQ(parse_request("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n"
                          "Transfer-Encoding: chunked\r\n\r\n", r),
            parse_status::not_implemented);
  for (const char* bad : {"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
                          "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
                          "Transfer-Encoding: gzip\r\n\r\n",
                          "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\r\n\r\n",
                          "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
                          "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
                          "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"})
    EXPECT_EQ(parse_request(bad, r), parse_status::bad) << bad;
}

// Session 40's probe: with two different Content-Lengths the first was used and the rest of the
// body read as the next request (a smuggling shape, RFC 9112 6.3).  The same value twice is one.
TEST(E5HttpRequest, DifferingContentLengthsAreRejected) {
  request r;
  EXPECT_EQ(parse_request("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n"
                          "content-length: 5\r\n\r\nGET /", r),
            parse_status::bad);
  ASSERT_EQ(parse_request("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n"
                          "Content-Length: 2\r\n\r\nab", r),
            parse_status::complete);
  EXPECT_EQ(r.content_length, 2u);
}

// Headers over the limit are 431 (RFC 6585), a body over it 413 (RFC 9110 15.5.14): both were
// too_large, and the server answered 431 to a body too large.
TEST(E5HttpRequest, OversizedHeadersAndBodiesAreRefused) {
  request r;
  std::string big = "GET / HTTP/1.1\r\nX: " + std::string(strata::e5::k_max_header_bytes, 'a');
  EXPECT_EQ(parse_request(big, r), parse_status::too_large);
  EXPECT_EQ(parse_request(big + "\r\n\r\n", r), parse_status::too_large);
  EXPECT_EQ(parse_request("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 999999999\r\n\r\n", r),
            parse_status::body_too_large);
  EXPECT_EQ(parse_request("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1048577\r\n\r\n", r),
            parse_status::body_too_large);
  EXPECT_EQ(parse_request("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1048576\r\n\r\n", r),
            parse_status::incomplete);
}

// This session's probe: lines were split at CRLF only, so "X: a\nContent-Length: 22" was one field
// whose value held the LF, and the 22 bytes after the header block were served as the next
// request; nginx (and any parser that takes a bare LF as a line end, RFC 9112 2.2) reads them as
// this request's body.  A bare CR, a NUL or another control byte in a value or the target: refused
// too (RFC 9110 5.5).
TEST(E5HttpRequest, ControlBytesAndBareLineEndsAreRejected) {
  request r;
  for (const char* bad : {"GET / HTTP/1.1\r\nX: a\nContent-Length: 22\r\n\r\nGET /s HTTP/1.1\r\n\r\n",
                          "GET / HTTP/1.1\r\nX: a\rContent-Length: 22\r\n\r\nGET /s HTTP/1.1\r\n\r\n",
                          "GET / HTTP/1.1\r\nX: a\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
                          "GET / HTTP/1.1\r\nX: a\x01" "b\r\n\r\n", "GET / HTTP/1.1\r\nX: a\x7f\r\n\r\n",
                          "GET /a\x01" "b HTTP/1.1\r\n\r\n", "GET /a\tb HTTP/1.1\r\n\r\n",
                          "GET / HTTP/1.1\nHost: a\n\n"})
    EXPECT_EQ(parse_request(bad, r), parse_status::bad) << bad;
  using namespace std::string_literals;
  EXPECT_EQ(parse_request("GET / HTTP/1.1\r\nX: a\0b\r\n\r\n"s, r), parse_status::bad);
  EXPECT_EQ(parse_request("GET /a\0b HTTP/1.1\r\n\r\n"s, r), parse_status::bad);
  // A bare LF is refused before the header block ends: the client is answered, not kept waiting.
  EXPECT_EQ(parse_request("GET / HTTP/1.1\nHost: a\n", r), parse_status::bad);
  // A tab inside a value and bytes over 0x7f (obs-text) stay valid.
  ASSERT_EQ(parse_request("GET / HTTP/1.1\r\nHost: a\r\nX: a\tb \xe9\r\n\r\n", r),
            parse_status::complete);
  EXPECT_EQ(*r.header("x"), "a\tb \xe9");
}

// A probe's finding: requests without Host, or with two, got 200.  RFC 9112 3.2: a server MUST
// answer 400 to an HTTP/1.1 request that lacks Host and to any request with more than one Host
// field line or an invalid Host value.  HTTP/1.0 may leave it out, and it may be empty.
TEST(E5HttpRequest, HostIsRequiredOnceAndValid) {
  request r;
  for (const char* bad : {"GET / HTTP/1.1\r\n\r\n", "GET / HTTP/1.1\r\nX: a\r\n\r\n",
                          "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
                          "GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n",
                          "GET / HTTP/1.0\r\nHost: a\r\nHost: a\r\n\r\n"})
    EXPECT_EQ(parse_request(bad, r), parse_status::bad) << bad;
  for (const char* bad_host :
       {"a b", "a/b", "u@a", "a:8x", "a:1:2", "[::1", "[::1]x", "a%4", "a%zz", "\xe9"})
    EXPECT_EQ(parse_request("GET / HTTP/1.1\r\nHost: " + std::string(bad_host) + "\r\n\r\n", r),
              parse_status::bad)
        << bad_host;
  ASSERT_EQ(parse_request("GET / HTTP/1.0\r\n\r\n", r), parse_status::complete);
  for (const char* good_host :
       {"a", " example.com ", "127.0.0.1:8080", "[::1]:80", "[::1]", "a:", "",
        "x_y-z.~%41!$&'()*+,;="})
    EXPECT_EQ(parse_request("GET / HTTP/1.1\r\nHost:" + std::string(good_host) + "\r\n\r\n", r),
              parse_status::complete)
        << good_host;
}

// Each read of a slow request rescanned the whole buffer (quadratic in the header size when bytes
// trickle in); parse_progress makes the next call resume.  Bytes delivered one at a time, as the
// server sees them, must parse exactly as when they come at once, wherever a line end, the
// header-block end or a bad byte falls between two reads.
TEST(E5HttpRequest, BytesOneAtATimeParseAsAllAtOnce) {
  const std::string big_header = "GET / HTTP/1.1\r\nHost: a\r\nX: " +
                                 std::string(strata::e5::k_max_header_bytes, 'a') + "\r\n\r\n";
  const std::string inputs[] = {
      "GET /a?b=c HTTP/1.1\r\nHost: x\r\nUser-Agent:  wrk \r\n\r\n",
      "POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 7\r\n\r\n\r\n\r\nabc"
      "GET /2 HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\nHEAD /3 HTTP/1.0\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\nX: a\nContent-Length: 22\r\n\r\nGET /s HTTP/1.1\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\nX: a\r\rb\r\n\r\n",
      "GET / HTTP/1.1\r\n\nHost: a\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2000000\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\n\r\n",
      big_header,
      "GET /" + std::string(strata::e5::k_max_header_bytes, 'a') + " HTTP/1.1\r\n\r\n",
  };
  for (const std::string& in : inputs) {
    // All at once: the requests one after another, up to the first that is not complete.
    std::vector<request> whole;
    parse_status whole_end = parse_status::incomplete;
    for (size_t off = 0; off < in.size();) {
      request r;
      whole_end = parse_request(std::string_view(in).substr(off), r);
      if (whole_end != parse_status::complete) break;
      off += r.consumed;
      whole.push_back(r);
    }
    // One byte more each call, resuming; a request whose status is known ends the run as in
    // the server (bad, too large), except a complete one, after which the next starts fresh.
    std::vector<request> trickled;
    parse_status trickled_end = parse_status::incomplete;
    strata::e5::parse_progress progress;
    size_t off = 0, n = 0;
    auto known = [](parse_status ps) {
      return ps != parse_status::complete && ps != parse_status::incomplete;
    };
    while (++n <= in.size() && !known(trickled_end)) {
      while (off < n) {
        request r;
        trickled_end = parse_request(std::string_view(in).substr(off, n - off), r, &progress);
        if (trickled_end != parse_status::complete) break;
        off += r.consumed;
        progress = {};
        trickled.push_back(r);
      }
      if (trickled_end == parse_status::incomplete && progress.need == 0) {
        ASSERT_EQ(progress.scanned, n - off) << "resumes after every byte seen";
      }
    }
    EXPECT_EQ(int(trickled_end), int(whole_end)) << in.substr(0, 80);
    if (known(trickled_end)) {
      // Refused at the same byte as a fresh parse refuses it (a bare LF: at once, not at the end
      // of the header block).
      request r;
      const size_t stop = n - 1;
      EXPECT_EQ(int(parse_request(std::string_view(in).substr(off, stop - off), r)),
                int(trickled_end));
      EXPECT_EQ(parse_request(std::string_view(in).substr(off, stop - 1 - off), r),
                parse_status::incomplete)
          << in.substr(0, 80);
    }
    ASSERT_EQ(trickled.size(), whole.size()) << in.substr(0, 80);
    for (size_t i = 0; i < whole.size(); ++i) {
      EXPECT_EQ(trickled[i].method, whole[i].method);
      EXPECT_EQ(trickled[i].target, whole[i].target);
      EXPECT_EQ(trickled[i].version, whole[i].version);
      EXPECT_EQ(trickled[i].headers, whole[i].headers);
      EXPECT_EQ(trickled[i].content_length, whole[i].content_length);
      EXPECT_EQ(trickled[i].keep_alive, whole[i].keep_alive);
      EXPECT_EQ(trickled[i].consumed, whole[i].consumed);
    }
  }
}

TEST(E5HttpRequest, KnownMethodsAreTheStandardOnesCaseSensitive) {
  using strata::e5::is_known_method;
  for (const char* m : {"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"})
    EXPECT_TRUE(is_known_method(m)) << m;
  for (const char* m : {"get", "FOO", "GETX", "", "PROPFIND"}) EXPECT_FALSE(is_known_method(m)) << m;
}
