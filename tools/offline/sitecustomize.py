"""Network guard for the test run: with REPLIB_OFFLINE=1, any connection, datagram or name lookup that
is not to this machine (loopback, Unix sockets) raises, and is logged to $REPLIB_OFFLINE_LOG so the
test run fails even if the notebook's code catches the error. Loaded through PYTHONPATH by `replib
smoke`, so every Jupyter kernel the notebook tests start inherits it. Guarded: socket.connect,
connect_ex, sendto (UDP), getaddrinfo, gethostbyname, gethostbyname_ex and gethostbyaddr; the
higher-level clients (urllib, http.client, requests, DNS resolvers) all go through these."""

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

    _socket = socket.socket
    _connect, _connect_ex, _sendto = _socket.connect, _socket.connect_ex, _socket.sendto
    _lookups = {name: getattr(socket, name)
                for name in ("getaddrinfo", "gethostbyname", "gethostbyname_ex", "gethostbyaddr")}

    def _check(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not _is_local(address[0]):
            _refuse(address)

    def connect(self, address):
        _check(self, address)
        return _connect(self, address)

    def connect_ex(self, address):
        _check(self, address)
        return _connect_ex(self, address)

    def sendto(self, data, *args):
        _check(self, args[-1])  # sendto(data, address) or sendto(data, flags, address)
        return _sendto(self, data, *args)

    def _guarded(name):
        lookup = _lookups[name]

        def guarded(host, *args, **kwargs):
            if not _is_local(host):
                _refuse(host)
            return lookup(host, *args, **kwargs)

        guarded.__name__ = name
        return guarded

    _socket.connect, _socket.connect_ex, _socket.sendto = connect, connect_ex, sendto
    for _name in _lookups:
        setattr(socket, _name, _guarded(_name))
