"""Leaf's gRPC API from Python: stubs generated from proto/leaf/v1/leaf.proto with grpcio-tools
(no generated code is kept; they are made afresh in a temporary directory), and a leaf-server
binary started for a test or a tour.

    python -m grpc_tools.protoc -I proto --python_out=OUT --grpc_python_out=OUT leaf/v1/leaf.proto

is all a project of its own needs; this module does the same at import.

Over TLS (a server with `[server.tls]`), a channel takes the certificate authority that issued
the server's certificate, and a client certificate when the server asks for one
(`server.tls.client_ca_file`); `secure_channel` below does that:

    credentials = grpc.ssl_channel_credentials(
        root_certificates=open("ca.pem", "rb").read(),   # None: the system's authorities
        private_key=open("client-key.pem", "rb").read(), # both None without a client CA
        certificate_chain=open("client.pem", "rb").read(),
    )
    channel = grpc.secure_channel("localhost:8080", credentials)

The host of the address must be a name the server's certificate holds (a DNS name, or an IP
address in its subjectAltName). A plaintext channel (`grpc.insecure_channel`) to a TLS port
fails at once with UNAVAILABLE: the server answers it with an HTTP/2 GOAWAY.
"""

import os
import pathlib
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request

import grpc

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROTO = ROOT / "proto"

_generated = tempfile.mkdtemp(prefix="leaf-grpc-py-")


def _generate():
    from grpc_tools import protoc

    args = [
        "grpc_tools.protoc",
        f"-I{PROTO}",
        f"--python_out={_generated}",
        f"--grpc_python_out={_generated}",
        "leaf/v1/leaf.proto",
    ]
    if protoc.main(args) != 0:
        raise RuntimeError(f"grpc_tools.protoc failed on {PROTO}/leaf/v1/leaf.proto")
    sys.path.insert(0, _generated)


_generate()

from leaf.v1 import leaf_pb2, leaf_pb2_grpc  # noqa: E402  (generated just above)

__all__ = ["leaf_pb2", "leaf_pb2_grpc", "Server", "secure_channel"]


def secure_channel(address, ca_file=None, cert_file=None, key_file=None):
    """A gRPC channel over TLS to `address` (HOST:PORT): the server's certificate must chain to
    the authority of `ca_file` (PEM; None: the system's) and name HOST. `cert_file` and
    `key_file` (PEM): the client's certificate and key, for a server with
    `server.tls.client_ca_file`."""

    def read(path):
        return pathlib.Path(path).read_bytes() if path else None

    credentials = grpc.ssl_channel_credentials(
        root_certificates=read(ca_file),
        private_key=read(key_file),
        certificate_chain=read(cert_file),
    )
    return grpc.secure_channel(address, credentials)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """The leaf-server binary of LEAFTEST_SERVER_BIN on a free loopback port, in a temporary
    directory (its SQLite file and worker-id cache), with the given LEAF_ variables over a
    clean environment. `tls_ca`: when `env` turns TLS on (`LEAF_SERVER__TLS__CERT_FILE`), the
    authority that issued the server's certificate, which the readiness check trusts."""

    def __init__(self, env=None, tls_ca=None):
        binary = os.environ.get("LEAFTEST_SERVER_BIN")
        if not binary:
            raise RuntimeError("LEAFTEST_SERVER_BIN must name a leaf-server binary")
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self._ready_context = ssl.create_default_context(cafile=str(tls_ca)) if tls_ca else None
        scheme = "https" if tls_ca else "http"
        self._ready_url = f"{scheme}://{self.address}/readyz"
        self.dir = tempfile.TemporaryDirectory(prefix="leaf-grpc-server-")
        clean = {k: v for k, v in os.environ.items() if not k.upper().startswith("LEAF_")}
        clean.update(
            {
                "LEAF_SERVER__LISTEN": self.address,
                "LEAF_LOG__LEVEL": "warn",
            }
        )
        clean.update(env or {})
        self.log = open(pathlib.Path(self.dir.name) / "server.log", "w+")
        self.process = subprocess.Popen(
            [binary],
            cwd=self.dir.name,
            env=clean,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.log,
        )
        self._wait_ready()

    def _wait_ready(self, limit_s=30):
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"leaf-server exited: {self.log_text()}")
            try:
                with urllib.request.urlopen(
                    self._ready_url, timeout=1, context=self._ready_context
                ) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"leaf-server not ready within {limit_s} s: {self.log_text()}")

    def log_text(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self):
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()
        self.dir.cleanup()
