"""Loopback TCP for a few seconds: a bulk stream with 4 MiB socket buffers and a connection storm.

The stream makes order-3 page frags (skb_page_frag_refill); each accepted connection clones its
socket in softirq (tcp_v4_syn_recv_sock), so the slab behind it refills atomically. Used for the
README's "who makes the non-blocking high-order allocations" example:

    kmemscope record -o ex --preset atomic-origins -e 'kmem:mm_page_free:order > 0' \
        -- python3 examples/workload_loopback_tcp.py 3
"""
import socket
import sys
import threading
import time


def stream(seconds):
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def drain():
        conn, _ = srv.accept()
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        while conn.recv(1 << 20):
            pass

    reader = threading.Thread(target=drain)
    reader.start()
    out = socket.create_connection(("127.0.0.1", port))
    out.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    chunk, sent, end = b"x" * (1 << 20), 0, time.monotonic() + seconds
    while time.monotonic() < end:
        out.sendall(chunk)
        sent += 1
    out.close()
    reader.join()
    return sent


def connection_storm(seconds):
    srv = socket.create_server(("127.0.0.1", 0), backlog=4096)
    stop = threading.Event()

    def accept():
        held = []
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                break
            held.append(conn)
            if len(held) > 2000:
                for c in held:
                    c.close()
                held = []

    threading.Thread(target=accept, daemon=True).start()
    opened, conns, end = 0, [], time.monotonic() + seconds
    while time.monotonic() < end:
        conns.append(socket.create_connection(srv.getsockname()))
        opened += 1
        if len(conns) > 2000:
            for c in conns:
                c.close()
            conns = []
    stop.set()
    return opened


if __name__ == "__main__":
    secs = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    result = {}
    storm = threading.Thread(target=lambda: result.update(conns=connection_storm(secs)))
    storm.start()
    mib = stream(secs)
    storm.join()
    print(f"workload_loopback_tcp: sent {mib} MiB, opened {result.get('conns', 0)} connections",
          file=sys.stderr)
