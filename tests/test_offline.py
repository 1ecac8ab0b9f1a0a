"""The network guard that `make test` loads into every notebook kernel."""

import os
import subprocess
import sys
from pathlib import Path

GUARD = Path(__file__).resolve().parents[1] / "tools" / "offline"

PROBE = """
import socket, threading
server = socket.socket(); server.bind(("127.0.0.1", 0)); server.listen(1)
threading.Thread(target=server.accept, daemon=True).start()
socket.create_connection(server.getsockname(), timeout=5).close()   # loopback is allowed
print("loopback ok")
try:
    socket.create_connection(("192.0.2.1", 80), timeout=5)
except ConnectionRefusedError as err:
    print("blocked:", err)
try:
    socket.getaddrinfo("example.org", 443)
except ConnectionRefusedError as err:
    print("blocked:", err)
"""


def test_guard_blocks_outside_connections_and_logs_them(tmp_path):
    log = tmp_path / "attempts.log"
    env = dict(os.environ, PYTHONPATH=str(GUARD), REPLIB_OFFLINE="1", REPLIB_OFFLINE_LOG=str(log))
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    assert "loopback ok" in out.stdout
    assert out.stdout.count("blocked: replib offline guard") == 2
    assert "192.0.2.1" in log.read_text() and "example.org" in log.read_text()


def test_guard_is_inert_without_the_switch():
    env = dict(os.environ, PYTHONPATH=str(GUARD))
    env.pop("REPLIB_OFFLINE", None)
    code = "import socket; print(socket.getaddrinfo.__module__)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "socket"
