"""The network guard that `make test` loads into every notebook kernel."""

import os
import subprocess
import sys
from pathlib import Path

from replib.book import smoke_env

ROOT = Path(__file__).resolve().parents[1]
GUARD = ROOT / "tools" / "offline"

PROBE = """
import socket, threading
server = socket.socket(); server.bind(("127.0.0.1", 0)); server.listen(1)
threading.Thread(target=server.accept, daemon=True).start()
socket.create_connection(server.getsockname(), timeout=5).close()   # loopback is allowed
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); udp.bind(("127.0.0.1", 0))
udp.sendto(b"x", udp.getsockname())                                    # so is loopback UDP
print("loopback ok")
attempts = [
    lambda: socket.create_connection(("192.0.2.1", 80), timeout=5),
    lambda: socket.getaddrinfo("example.org", 443),
    lambda: socket.gethostbyname("example.net"),
    lambda: socket.gethostbyname_ex("example.com"),
    lambda: socket.gethostbyaddr("192.0.2.7"),
    lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("192.0.2.9", 53)),
    lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", 0, ("192.0.2.10", 53)),
]
for attempt in attempts:
    try:
        attempt()
    except ConnectionRefusedError as err:
        print("blocked:", err)
"""
TARGETS = ("192.0.2.1", "example.org", "example.net", "example.com", "192.0.2.7", "192.0.2.9", "192.0.2.10")


def test_guard_blocks_outside_connections_and_logs_them(tmp_path):
    log = tmp_path / "attempts.log"
    env = dict(os.environ, PYTHONPATH=str(GUARD), REPLIB_OFFLINE="1", REPLIB_OFFLINE_LOG=str(log))
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    assert "loopback ok" in out.stdout
    assert out.stdout.count("blocked: replib offline guard") == len(TARGETS)
    assert all(target in log.read_text() for target in TARGETS)


def test_guard_is_inert_without_the_switch():
    env = dict(os.environ, PYTHONPATH=str(GUARD))
    env.pop("REPLIB_OFFLINE", None)
    code = "import socket; print(socket.getaddrinfo.__module__)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "socket"


def test_guard_is_loaded_in_a_kernel_started_as_smoke_starts_them(tmp_path):
    from jupyter_client.manager import start_new_kernel

    log = tmp_path / "attempts.log"
    km, kc = start_new_kernel(kernel_name="python3", env=smoke_env(ROOT, log), cwd=str(tmp_path))
    try:
        reply = kc.execute_interactive(
            "import socket\ntry:\n    socket.gethostbyname('example.org')\nexcept ConnectionRefusedError as e:\n"
            "    print('blocked in kernel')", timeout=60, output_hook=lambda msg: None)
        assert reply["content"]["status"] == "ok"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    assert "example.org" in log.read_text()
