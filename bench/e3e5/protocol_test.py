#!/usr/bin/env python3
"""strata-bench-e5-httpd against the HTTP rules a probe found it broke, one check per run, each
bounded in bytes and time, on 127.0.0.1 only:

- host: an HTTP/1.1 request without Host, or any request with two Host fields or an invalid one,
  must get 400 (RFC 9112 3.2); it got 200.  HTTP/1.0 may leave Host out.
- too_large: a header block over the limit gets 431 and a Content-Length over the body limit 413
  (RFC 6585, RFC 9110 15.5.14); the body got 431.
- allow: a 405 must carry Allow (RFC 9110 15.5.6); it had none.
- idle_timeout: a connection that sends nothing, or a header byte now and then (slowloris), or
  stays idle after an answer, is closed after --idle-timeout; it was held forever.  A connection
  that keeps sending whole requests is not.
- not_implemented: a method the server does not know gets 501 (RFC 9110 9.1, 15.6.2), a known one
  it does not serve 405; the unknown one got 405.
- request_timeout: a connection whose request was partly received when --idle-timeout ran out
  gets 408 before the close (RFC 9110 15.5.9); it was closed with nothing.  A silent one or one
  idle after its answer gets no 408.
- expect_continue: a request with "Expect: 100-continue" whose body has not been sent is answered
  at once (RFC 9110 10.1.1), here with 100 Continue; it got nothing, and curl waits 1 s for it.
- half_close: a client that sends its requests and shuts its side (shutdown(SHUT_WR)) is answered
  in full, then the connection is closed; the server closed at the end of input with answers still
  unwritten (helper H8: 100 pipelined GETs with 64 KiB answers, 59 and a half came back).
- statuses: the answers helper H8 found wrong, through the server: a request line over the limit
  414 (was 431), HTTP/2.0 and the HTTP/2 preface 505 (were 400), HTTP/1.2 200 (was 400), a chunked
  body 501 (was 400), a Content-Length of 10 digits over the limit 413 (was 400), one with leading
  zeros 200 (was 400), a NUL in a field name 400 (was 200).

    protocol_test.py PATH-TO-strata-bench-e5-httpd CHECK
"""
import json
import socket
import subprocess
import sys
import time


def start(*extra):
    srv = subprocess.Popen([sys.argv[1], "--port", "0", "--threads", "1", "--max-seconds", "60", *extra],
                           stdout=subprocess.PIPE, text=True)
    line = srv.stdout.readline()
    if not line:
        srv.wait(timeout=10)
        raise RuntimeError(f"server did not start (exit {srv.returncode})")
    return srv, json.loads(line)["port"]


def stop(srv):
    srv.terminate()
    srv.communicate(timeout=30)


def connect(port, timeout=3.0):
    return socket.create_connection(("127.0.0.1", port), timeout=timeout)


def read_response(s, buf=b"", head=False):
    """One response from s: (status, {lower-case name: [values]}, body, rest); status None when the
    connection closed or timed out first."""
    try:
        while b"\r\n\r\n" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                return None, {}, b"", buf
            buf += chunk
        block, buf = buf.split(b"\r\n\r\n", 1)
        lines = block.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers.setdefault(name.strip().lower(), []).append(value.strip())
        length = 0 if head or status < 200 else int(headers.get("content-length", ["0"])[0])
        while len(buf) < length:
            chunk = s.recv(65536)
            if not chunk:
                return None, {}, b"", buf
            buf += chunk
        return status, headers, buf[:length], buf[length:]
    except (socket.timeout, ConnectionResetError):
        return None, {}, b"", buf


def closed_within(s, seconds) -> bool:
    """True when the server closes s (EOF or reset) within `seconds`, reading whatever comes."""
    s.settimeout(seconds)
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            if not s.recv(4096):
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False
    return False


def ask(port, request: bytes):
    s = connect(port)
    try:
        s.sendall(request)
        status, headers, _, _ = read_response(s)
        return status, headers, status is not None and closed_within(s, 3)
    finally:
        s.close()


def report(results) -> bool:
    for what, ok in results:
        print(f"{'ok  ' if ok else 'FAIL'} {what}")
    return all(ok for _, ok in results)


def check_host(port) -> bool:
    r = []
    for name, req in [("no Host in HTTP/1.1", b"GET / HTTP/1.1\r\n\r\n"),
                      ("two Host fields", b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
                      ("the same Host twice", b"GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n"),
                      ("two Host fields in HTTP/1.0", b"GET / HTTP/1.0\r\nHost: a\r\nHost: a\r\n\r\n"),
                      ("a Host with a path", b"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n"),
                      ("a Host with a bad port", b"GET / HTTP/1.1\r\nHost: a:8x\r\n\r\n")]:
        status, _, closed = ask(port, req)
        r.append((f"{name}: 400 and close (got {status}, closed {closed})", status == 400 and closed))
    for name, req in [("HTTP/1.0 without Host", b"GET / HTTP/1.0\r\n\r\n"),
                      ("HTTP/1.1 with Host", b"GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nConnection: close\r\n\r\n"),
                      ("an IPv6 Host", b"GET / HTTP/1.1\r\nHost: [::1]:80\r\nConnection: close\r\n\r\n")]:
        status, _, _ = ask(port, req)
        r.append((f"{name}: 200 (got {status})", status == 200))
    return report(r)


def check_too_large(port) -> bool:
    r = []
    status, _, closed = ask(port, b"GET / HTTP/1.1\r\nHost: a\r\nX: " + b"a" * 70000 + b"\r\n\r\n")
    r.append((f"70 kB of header fields: 431 and close (got {status}, closed {closed})",
              status == 431 and closed))
    status, _, closed = ask(port, b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2000000\r\n\r\n")
    r.append((f"a 2 MB Content-Length: 413 and close (got {status}, closed {closed})",
              status == 413 and closed))
    return report(r)


def check_allow(port) -> bool:
    r = []
    s = connect(port)
    try:
        for req in [b"DELETE / HTTP/1.1\r\nHost: a\r\n\r\n",
                    b"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello"]:
            s.sendall(req)
            status, headers, _, _ = read_response(s)
            allow = [m.strip() for v in headers.get("allow", []) for m in v.split(",")]
            r.append((f"{req.split()[0].decode()}: 405 with Allow: GET, HEAD (got {status}, "
                      f"Allow {headers.get('allow')})", status == 405 and sorted(allow) == ["GET", "HEAD"]))
        s.sendall(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        status, _, _, _ = read_response(s)
        r.append((f"the connection goes on after a 405 (got {status})", status == 200))
    finally:
        s.close()
    return report(r)


def check_not_implemented(port) -> bool:
    r = []
    s = connect(port)
    try:
        for req, want in [(b"FOO / HTTP/1.1\r\nHost: a\r\n\r\n", 501),
                          (b"get / HTTP/1.1\r\nHost: a\r\n\r\n", 501),  # methods are case-sensitive
                          (b"PUT / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nab", 405),
                          (b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", 200)]:
            s.sendall(req)
            status, headers, _, _ = read_response(s)
            r.append((f"{req.split()[0].decode()}: {want} (got {status}, Allow {headers.get('allow')})",
                      status == want and (status == 405) == ("allow" in headers)))
    finally:
        s.close()
    return report(r)


IDLE = 1.0  # the --idle-timeout this check runs the server with (at 0.5 s the check failed once
# at load 12, where a client sending every 0.2 s has only 0.3 s of slack before it looks idle)


def check_idle_timeout(port) -> bool:
    r = []
    s = connect(port)
    t0 = time.monotonic()
    closed = closed_within(s, 3)
    took = time.monotonic() - t0
    s.close()
    r.append((f"silent client closed within 3 s (closed {closed} after {took:.2f} s, timeout {IDLE})",
              closed and took >= IDLE * 0.8))

    s = connect(port)
    s.sendall(b"GET / HTTP/1.1\r\n")
    s.settimeout(0.1)
    t0, closed = time.monotonic(), False
    for _ in range(30):  # one header byte every 0.1 s, 3 s at most
        try:
            s.sendall(b"X")
            if s.recv(4096) == b"":
                closed = True
                break
        except socket.timeout:
            continue
        except (BrokenPipeError, ConnectionResetError):
            closed = True
            break
    took = time.monotonic() - t0
    s.close()
    r.append((f"slowloris (a byte every 0.1 s) closed within 3 s (closed {closed} after {took:.2f} s)",
              closed))

    s = connect(port)
    s.sendall(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
    status, _, _, _ = read_response(s)
    closed = closed_within(s, 3)
    s.close()
    r.append((f"idle after an answer: closed within 3 s (status {status}, closed {closed})",
              status == 200 and closed))

    s = connect(port)
    statuses = []
    for _ in range(8):  # a request every 0.2 s for 1.6 s, past the timeout: never idle that long
        time.sleep(0.2)
        s.sendall(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        statuses.append(read_response(s)[0])
    s.close()
    r.append((f"a client sending requests every 0.2 s keeps its connection (got {statuses})",
              statuses == [200] * 8))
    return report(r)


def check_request_timeout(port) -> bool:
    r = []
    for name, req, want in [("half a header block", b"GET / HTTP/1.1\r\nHost: a\r\n", 408),
                            ("a header block without its body",
                             b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 9\r\n\r\nab", 408),
                            ("an answered request, then part of one",
                             b"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET / HT", 408),
                            ("nothing", b"", None)]:
        s = connect(port)
        try:
            s.sendall(req)
            rest, statuses = b"", []
            for _ in range(3):  # at most two answers, then the close
                status, headers, _, rest = read_response(s, rest)
                statuses.append(status)
                if status is None:
                    break
            closed = statuses[-1] is None
            got = [x for x in statuses if x is not None]
            want_all = ([200] if req.startswith(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n") else []) + \
                ([want] if want else [])
            r.append((f"{name}: {want_all} then close (got {statuses})", got == want_all and closed))
        finally:
            s.close()
    return report(r)


def check_expect_continue(port) -> bool:
    r = []
    s = connect(port)
    try:
        # As curl does: the header block, then up to 1 s waiting for 100 before the body.
        s.sendall(b"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
        s.settimeout(0.9)
        status, _, _, rest = read_response(s)
        r.append((f"Expect: 100-continue answered within 0.9 s (got {status})", status == 100))
        s.settimeout(3)
        s.sendall(b"hello")
        status, headers, _, rest = read_response(s, rest)
        r.append((f"then the body: 405 (got {status})", status == 405))
        s.sendall(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        status, _, _, _ = read_response(s, rest)
        r.append((f"the body was consumed: the next request gets 200 (got {status})", status == 200))
    finally:
        s.close()
    s = connect(port)
    try:  # the body sent with the header block: no 100 is needed, and none may come after the 405
        s.sendall(b"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\nhello"
                  b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        statuses, rest = [], b""
        while len(statuses) < 3 and None not in statuses and len([x for x in statuses if x >= 200]) < 2:
            status, _, _, rest = read_response(s, rest)
            statuses.append(status)
        finals = [x for x in statuses if x is not None and x >= 200]
        r.append((f"body with the header block: 405 then 200 (got {statuses})", finals == [405, 200]))
    finally:
        s.close()
    s = connect(port, timeout=0.5)
    try:  # HTTP/1.0: the expectation is ignored (RFC 9110 10.1.1), no 100 is sent
        s.sendall(b"POST /p HTTP/1.0\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
        status, _, _, rest = read_response(s)
        s.settimeout(3)
        s.sendall(b"hello")
        final, _, _, _ = read_response(s, rest) if status is None else (status, 0, 0, 0)
        r.append((f"HTTP/1.0: no 100, then 405 (got {status} before the body, {final} after)",
                  status is None and final == 405))
    finally:
        s.close()
    return report(r)


def check_half_close(port) -> bool:
    r = []
    s = connect(port, timeout=5)
    try:
        s.sendall(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n" * 100)
        s.shutdown(socket.SHUT_WR)
        statuses, rest = [], b""
        for _ in range(101):  # 100 answers, then the close
            status, _, body, rest = read_response(s, rest)
            statuses.append(status)
            if status is None:
                break
        got = [x for x in statuses if x is not None]
        r.append((f"100 pipelined GETs, then shutdown: 100 answers of 64 KiB then close "
                  f"(got {len(got)} answers, {got.count(200)} of them 200, then "
                  f"{'close' if statuses[-1] is None else 'no close'})",
                  got == [200] * 100 and statuses[-1] is None and rest == b""))
    finally:
        s.close()
    s = connect(port)
    try:  # part of a request, then shutdown: no answer can come; closed, not held to the timeout
        s.sendall(b"GET / HTTP/1.1\r\nHo")
        s.shutdown(socket.SHUT_WR)
        closed = closed_within(s, 3)
        r.append((f"part of a request, then shutdown: closed within 3 s (closed {closed})", closed))
    finally:
        s.close()
    return report(r)


def check_statuses(port) -> bool:
    r = []
    for name, req, want in [
            ("a 70 kB request line", b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\nHost: a\r\n\r\n", 414),
            ("HTTP/2.0", b"GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505),
            ("the HTTP/2 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505),
            ("Transfer-Encoding: chunked",
             b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 501),
            ("Content-Length: 10000000000", b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10000000000\r\n\r\n", 413),
            ("a NUL in a field name", b"GET / HTTP/1.1\r\nHost: a\r\nX\0: a\r\n\r\n", 400)]:
        status, _, closed = ask(port, req)
        r.append((f"{name}: {want} and close (got {status}, closed {closed})", status == want and closed))
    for name, req, want in [
            ("HTTP/1.2", b"GET / HTTP/1.2\r\nHost: a\r\nConnection: close\r\n\r\n", [200]),
            ("Content-Length: 0000000005, then a GET",
             b"PUT / HTTP/1.1\r\nHost: a\r\nContent-Length: 0000000005\r\n\r\nhello"
             b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", [405, 200])]:
        s = connect(port)
        try:
            s.sendall(req)
            statuses, rest = [], b""
            while len(statuses) < len(want) and None not in statuses:
                status, _, _, rest = read_response(s, rest)
                statuses.append(status)
            r.append((f"{name}: {want} (got {statuses})", statuses == want))
        finally:
            s.close()
    return report(r)


CHECKS = {"host": check_host, "too_large": check_too_large, "allow": check_allow,
          "idle_timeout": check_idle_timeout, "expect_continue": check_expect_continue,
          "not_implemented": check_not_implemented, "request_timeout": check_request_timeout,
          "half_close": check_half_close, "statuses": check_statuses}


def main() -> int:
    check = CHECKS[sys.argv[2]]
    extra = ["--idle-timeout", str(IDLE)] if sys.argv[2] in ("idle_timeout", "request_timeout") else []
    if sys.argv[2] == "half_close":
        extra = ["--body-bytes", "65536"]  # answers that fill the socket buffers
    srv, port = start(*extra)
    try:
        return 0 if check(port) else 1
    finally:
        stop(srv)


if __name__ == "__main__":
    sys.exit(main())
