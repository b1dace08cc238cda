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
  std::string in = "POST / HTTP/1.1\r\nContent-Length: 4\r\n\r\nab";
  for (size_t n = 0; n < in.size(); ++n)
    EXPECT_EQ(parse_request(std::string_view(in).substr(0, n), r), parse_status::incomplete) << n;
  EXPECT_EQ(parse_request(in, r), parse_status::incomplete);
  in += "cd";
  ASSERT_EQ(parse_request(in, r), parse_status::complete);
  EXPECT_EQ(r.content_length, 4u);
  EXPECT_EQ(r.consumed, in.size());
}

TEST(E5HttpRequest, PipelinedRequestsAreConsumedOneByOne) {
  std::string in = "GET /1 HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\nConnection: close\r\n\r\n";
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
  ASSERT_EQ(parse_request("GET / HTTP/1.1\r\nConnection: foo, close\r\n\r\n", r), parse_status::complete);
  EXPECT_FALSE(r.keep_alive);
}

TEST(E5HttpRequest, MalformedInputIsRejected) {
  request r;
  for (const char* bad : {"NOT-HTTP\r\n\r\n", "GET /\r\n\r\n", "GET / HTTP/2.0\r\n\r\n",
                          "GET  / HTTP/1.1\r\n\r\n", "G(T / HTTP/1.1\r\n\r\n",
                          "GET / HTTP/1.1\r\nNoColon\r\n\r\n", "GET / HTTP/1.1\r\n: v\r\n\r\n",
                          "GET / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n",
                          "GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"})
    EXPECT_EQ(parse_request(bad, r), parse_status::bad) << bad;
}

// Session 40's probe: with two different Content-Lengths the first was used and the rest of the
// body read as the next request (a smuggling shape, RFC 9112 6.3).  The same value twice is one.
TEST(E5HttpRequest, DifferingContentLengthsAreRejected) {
  request r;
  EXPECT_EQ(parse_request("POST / HTTP/1.1\r\nContent-Length: 0\r\ncontent-length: 5\r\n\r\nGET /", r),
            parse_status::bad);
  ASSERT_EQ(parse_request("POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nab", r),
            parse_status::complete);
  EXPECT_EQ(r.content_length, 2u);
}

TEST(E5HttpRequest, OversizedHeadersAndBodiesAreRefused) {
  request r;
  std::string big = "GET / HTTP/1.1\r\nX: " + std::string(strata::e5::k_max_header_bytes, 'a');
  EXPECT_EQ(parse_request(big, r), parse_status::too_large);
  EXPECT_EQ(parse_request("POST / HTTP/1.1\r\nContent-Length: 999999999\r\n\r\n", r),
            parse_status::too_large);
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
  ASSERT_EQ(parse_request("GET / HTTP/1.1\r\nX: a\tb \xe9\r\n\r\n", r), parse_status::complete);
  EXPECT_EQ(*r.header("x"), "a\tb \xe9");
}
