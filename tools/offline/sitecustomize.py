"""Network guard for the test run: with REPLIB_OFFLINE=1, any connection or name lookup that is not
to this machine (loopback, Unix sockets) raises, and is logged to $REPLIB_OFFLINE_LOG so the test run
fails even if the notebook's code catches the error. Loaded through PYTHONPATH by `replib smoke`,
so every Jupyter kernel the notebook tests start inherits it."""

import os
import socket

if os.environ.get("REPLIB_OFFLINE") == "1":
    _LOOPBACK_NAMES = {"localhost", "ip6-localhost", "ip6-loopback", "", None}

    def _is_local(host) -> bool:
        if isinstance(host, bytes):
            host = host.decode(errors="replace")
        return host in _LOOPBACK_NAMES or str(host).startswith("127.") or host in ("::1", "0.0.0.0", "::")

    def _refuse(target):
        log = os.environ.get("REPLIB_OFFLINE_LOG")
        if log:
            with open(log, "a", encoding="utf-8") as handle:
                handle.write(f"{os.getcwd()}\t{target!r}\n")
        raise ConnectionRefusedError(f"replib offline guard: no network at run time (tried {target!r})")

    _connect, _connect_ex = socket.socket.connect, socket.socket.connect_ex
    _getaddrinfo = socket.getaddrinfo

    def _check(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not _is_local(address[0]):
            _refuse(address)

    def connect(self, address):
        _check(self, address)
        return _connect(self, address)

    def connect_ex(self, address):
        _check(self, address)
        return _connect_ex(self, address)

    def getaddrinfo(host, *args, **kwargs):
        if not _is_local(host):
            _refuse(host)
        return _getaddrinfo(host, *args, **kwargs)

    socket.socket.connect, socket.socket.connect_ex = connect, connect_ex
    socket.getaddrinfo = getaddrinfo
