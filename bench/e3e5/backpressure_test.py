#!/usr/bin/env python3
"""strata-bench-e5-httpd under clients that hold it back, each check bounded in bytes and time:

- a client that pipelines requests and never reads the answers: the server must stop reading while
  its answers wait, so its memory stays bounded.  Before (session 40's probe) it kept reading and
  queued every answer: 163 MB resident after 16 MiB of requests.
- the same with large answers: the requests already read must not all be answered at once.  Before
  (session 42's probe), 128 KiB of pipelined GETs with --body-bytes 65536 queued 470 MB of answers.
- more connections than the server has descriptors: it must not spin on the listening socket.
  Before, accept's EMFILE left it readable and the worker used a whole core while it lasted.

    backpressure_test.py PATH-TO-strata-bench-e5-httpd
"""
import json
import os
import resource
import socket
import subprocess
import sys
import time

LIMIT_KB = 64 * 1024  # the server's peak RSS allowed (it holds ~15 MB with the fix)
GET = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"  # HTTP/1.1 without Host is answered 400 (RFC 9112 3.2)


def start(*extra, preexec_fn=None):
    srv = subprocess.Popen([sys.argv[1], "--port", "0", "--threads", "1", "--max-seconds", "60", *extra],
                           stdout=subprocess.PIPE, text=True, preexec_fn=preexec_fn)
    return srv, json.loads(srv.stdout.readline())["port"]


def stop(srv) -> dict:
    srv.terminate()
    out, _ = srv.communicate(timeout=30)
    return json.loads(out.strip().splitlines()[-1])


def never_reads() -> bool:
    srv = subprocess.Popen([sys.argv[1], "--port", "0", "--threads", "1", "--max-seconds", "60"],
                           stdout=subprocess.PIPE, text=True)
    try:
        port = json.loads(srv.stdout.readline())["port"]
        s = socket.create_connection(("127.0.0.1", port), timeout=3)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        chunk = GET * 4000
        sent, start = 0, time.monotonic()
        try:  # bounded: 16 MiB, 20 s, or until the server stops taking them (the fix)
            while sent < 16 << 20 and time.monotonic() - start < 20:
                s.sendall(chunk)
                sent += len(chunk)
        except socket.timeout:
            pass
        time.sleep(0.5)
        s.close()
    finally:
        srv.terminate()
        out, _ = srv.communicate(timeout=30)
    doc = json.loads(out.strip().splitlines()[-1])
    peak = doc["peak_rss_kb"]
    print(f"sent {sent >> 20} MiB of requests; server peak RSS {peak} kB (limit {LIMIT_KB})")
    return peak < LIMIT_KB


def large_answers_never_read() -> bool:
    srv, port = start("--body-bytes", "65536")
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=3)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(GET * (128 * 1024 // len(GET)))  # 4854 requests, one write
        time.sleep(1.0)
        s.close()
    finally:
        doc = stop(srv)
    peak = doc["peak_rss_kb"]
    print(f"128 KiB of pipelined GETs, 64 KiB answers, never read: server peak RSS {peak} kB "
          f"(limit {LIMIT_KB})")
    return peak < LIMIT_KB


def out_of_descriptors() -> bool:
    def few_fds():
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    srv, port = start(preexec_fn=few_fds)
    socks = []
    try:
        socks = [socket.create_connection(("127.0.0.1", port), timeout=3) for _ in range(100)]
        time.sleep(0.3)
        tck = os.sysconf("SC_CLK_TCK")

        def cpu_s():
            f = open(f"/proc/{srv.pid}/stat").read().rsplit(")", 1)[1].split()
            return (int(f[11]) + int(f[12])) / tck

        c0 = cpu_s()
        time.sleep(2.0)
        busy = cpu_s() - c0
        for s in socks[:60]:  # descriptors free again: the connections still queued are taken
            s.close()
        last = socks[-1]
        last.settimeout(3)
        last.sendall(GET)
        answer = last.recv(64)
    except OSError as e:
        print(f"out of descriptors: {e!r}")
        return False
    finally:
        for s in socks:
            s.close()
        stop(srv)
    print(f"100 connections to a server with 64 descriptors: {busy:.2f} s CPU in 2 s idle (limit "
          f"0.5); a queued connection answered after some closed: {answer[:15]!r}")
    return busy < 0.5 and answer.startswith(b"HTTP/1.1 200")


def main() -> int:
    results = [never_reads(), large_answers_never_read(), out_of_descriptors()]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
