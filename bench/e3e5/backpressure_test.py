#!/usr/bin/env python3
"""strata-bench-e5-httpd under a client that pipelines requests and never reads the answers: the
server must stop reading while its answers wait, so its memory stays bounded.  Before (session
40's probe) it kept reading and queued every answer: 163 MB resident after 16 MiB of requests.

    backpressure_test.py PATH-TO-strata-bench-e5-httpd
"""
import json
import socket
import subprocess
import sys
import time

LIMIT_KB = 64 * 1024  # the server's peak RSS allowed (it holds ~15 MB with the fix)


def main() -> int:
    srv = subprocess.Popen([sys.argv[1], "--port", "0", "--threads", "1", "--max-seconds", "60"],
                           stdout=subprocess.PIPE, text=True)
    try:
        port = json.loads(srv.stdout.readline())["port"]
        s = socket.create_connection(("127.0.0.1", port), timeout=3)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        chunk = b"GET / HTTP/1.1\r\n\r\n" * 4000
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
    return 0 if peak < LIMIT_KB else 1


if __name__ == "__main__":
    sys.exit(main())
