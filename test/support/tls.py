"""TLS helpers for ramjet's end-to-end tests: a throwaway PKI, TLS fronts for engines, HTTPS clients.

  * make_pki(dir) -> Pki: a test root CA, an intermediate CA, server certificates (good, wrong host,
    DNS-only, expired, not yet valid, signed by an unrelated CA, signed by the intermediate with the
    chain in the cert file, a second good one with another serial) and a client certificate for mTLS,
    written as PEM files (python3-cryptography; EC P-256 keys, PKCS#8 "BEGIN PRIVATE KEY").
  * TlsFront: nginx as a TLS terminator in front of a plain-HTTP engine (ramjet-sim), unprivileged
    paths in a temp dir, one worker, daemon off, proxy_buffering off (SSE streams through), HTTP/1.1
    keep-alive, session cache + tickets (resumption works). Its access log records, per request, the
    SNI the client sent, whether the session was resumed and the client-certificate verdict.
  * StrictTlsFront: a Python TLS terminator that refuses a missing client certificate in the TLS
    handshake itself (OpenSSL SSL_VERIFY_FAIL_IF_NO_PEER_CERT) — nginx only refuses at the HTTP level
    (400 "No required SSL certificate was sent") — with the TLS version range of choice.
  * https_request()/https_scrape()/peer_certificate(): HTTPS clients with a context that trusts the
    test CA (standard library ssl + http.client), returning support.ramjet_proc.Response/Metrics.
"""

from __future__ import annotations

import datetime
import http.client
import ipaddress
import os
import select
import shutil
import socket
import ssl
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from support.ramjet_proc import Metrics, Response, exchange

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


# ---------------------------------------------------------------------------- certificates
def _utcnow() -> datetime.datetime:
    return datetime.datetime.utcnow().replace(microsecond=0)


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "ramjet tests"),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


@dataclass
class Issued:
    """A certificate and its key, in memory and on disk (cert_file may hold the chain)."""
    name: str
    cert: x509.Certificate
    key: object
    cert_file: str
    key_file: str

    @property
    def serial(self) -> int:
        return self.cert.serial_number

    def key_secrets(self) -> list:
        """Strings that would betray the private key in a log: every base64 line of its PEM body
        (PKCS#8 and the traditional EC form) and the private scalar in hex and decimal."""
        out = []
        for fmt in (serialization.PrivateFormat.PKCS8, serialization.PrivateFormat.TraditionalOpenSSL):
            pem = self.key.private_bytes(serialization.Encoding.PEM, fmt, serialization.NoEncryption())
            out += [ln for ln in pem.decode().splitlines() if ln and not ln.startswith("-----") and len(ln) >= 16]
        d = self.key.private_numbers().private_value
        out += [f"{d:064x}", f"{d:064X}", str(d)]
        der = self.key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption())
        out.append(der.hex())
        return out


def _build(subject: str, issuer_name: x509.Name, issuer_key, key, *, ca: bool = False, path_len=None,
           sans=(), ips=(), server: bool = True, client: bool = False,
           not_before: Optional[datetime.datetime] = None, not_after: Optional[datetime.datetime] = None,
           issuer_ski=None) -> x509.Certificate:
    now = _utcnow()
    b = (x509.CertificateBuilder()
         .subject_name(_name(subject))
         .issuer_name(issuer_name)
         .public_key(key.public_key())
         .serial_number(x509.random_serial_number())
         .not_valid_before(not_before or now - datetime.timedelta(hours=1))
         .not_valid_after(not_after or now + datetime.timedelta(days=30))
         .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False))
    if issuer_ski is not None:
        b = b.add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(issuer_ski),
                            critical=False)
    if ca:
        b = b.add_extension(x509.BasicConstraints(ca=True, path_length=path_len), critical=True)
        b = b.add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                          key_encipherment=False, data_encipherment=False,
                                          key_agreement=False, key_cert_sign=True, crl_sign=True,
                                          encipher_only=False, decipher_only=False), critical=True)
    else:
        b = b.add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        b = b.add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                          key_encipherment=False, data_encipherment=False,
                                          key_agreement=False, key_cert_sign=False, crl_sign=False,
                                          encipher_only=False, decipher_only=False), critical=True)
        ekus = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + \
               ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
        b = b.add_extension(x509.ExtendedKeyUsage(ekus), critical=False)
        alt = [x509.DNSName(s) for s in sans] + [x509.IPAddress(ipaddress.ip_address(i))
                                                   for i in ips]
        if alt:
            b = b.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


class _Ca:
    def __init__(self, cn: str, parent: Optional["_Ca"] = None):
        self.key = _key()
        if parent is None:
            self.cert = _build(cn, _name(cn), self.key, self.key, ca=True, path_len=1,
                               not_after=_utcnow() + datetime.timedelta(days=365))
        else:
            self.cert = _build(cn, parent.cert.subject, parent.key, self.key, ca=True, path_len=0,
                               not_after=_utcnow() + datetime.timedelta(days=365),
                               issuer_ski=parent.ski)
        self.parent = parent

    @property
    def ski(self):
        return self.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value

    def issue(self, cn: str, **kw) -> tuple:
        key = _key()
        return _build(cn, self.cert.subject, self.key, key, issuer_ski=self.ski, **kw), key


class Pki:
    """Everything a TLS test needs, as files under `dir` (see make_pki)."""

    def __init__(self, dir: Path):
        self.dir = Path(dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        now = _utcnow()
        root = _Ca("ramjet test root CA")
        inter = _Ca("ramjet test intermediate CA", parent=root)
        other = _Ca("unrelated CA")
        self._root, self._inter, self._other = root, inter, other
        self.ca_file = self._write("ca.pem", cert_pem(root.cert))
        self.other_ca_file = self._write("other-ca.pem", cert_pem(other.cert))
        self.ca_key_secrets = Issued("ca", root.cert, root.key, self.ca_file, "").key_secrets()
        good = dict(sans=["localhost"], ips=["127.0.0.1"])
        self.good = self._issue("good", root, "localhost", **good)
        self.good2 = self._issue("good2", root, "localhost", **good)   # same names, another serial/key
        self.wrong_host = self._issue("wrong-host", root, "wrong.example", sans=["wrong.example"])
        self.dns_only = self._issue("dns-only", root, "localhost", sans=["localhost"])
        self.expired = self._issue("expired", root, "localhost", **good,
                                   not_before=now - datetime.timedelta(days=30),
                                   not_after=now - datetime.timedelta(days=1))
        self.not_yet_valid = self._issue("not-yet-valid", root, "localhost", **good,
                                         not_before=now + datetime.timedelta(days=1),
                                         not_after=now + datetime.timedelta(days=30))
        self.untrusted = self._issue("untrusted", other, "localhost", **good)
        # Leaf signed by the intermediate; the cert file holds leaf + intermediate (the chain).
        self.chained = self._issue("chained", inter, "localhost", **good)
        self.client = self._issue("client", root, "ramjet test client", server=False, client=True)

    def _write(self, name: str, data: bytes, mode: int = 0o644) -> str:
        p = self.dir / name
        p.write_bytes(data)
        p.chmod(mode)
        return str(p)

    def _issue(self, name: str, ca: _Ca, cn: str, **kw) -> Issued:
        cert, key = ca.issue(cn, **kw)
        chain = cert_pem(cert) + (cert_pem(ca.cert) if ca.parent is not None else b"")
        return Issued(name, cert, key, self._write(f"{name}.crt", chain),
                      self._write(f"{name}.key", key_pem(key), 0o600))

    def all_issued(self) -> list:
        return [self.good, self.good2, self.wrong_host, self.dns_only, self.expired, self.not_yet_valid,
                self.untrusted, self.chained, self.client]

    def key_secrets(self) -> list:
        out = list(self.ca_key_secrets)
        for i in self.all_issued():
            out += i.key_secrets()
        return out

    def client_context(self, ca_file: Optional[str] = None, verify: bool = True,
                       cert: Optional[Issued] = None) -> ssl.SSLContext:
        """A client context trusting the test root (or ca_file), hostname checked; verify=False
        accepts anything."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        if verify:
            ctx.load_verify_locations(ca_file or self.ca_file)
        else:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if cert is not None:
            ctx.load_cert_chain(cert.cert_file, cert.key_file)
        return ctx


def make_pki(dir) -> Pki:
    return Pki(Path(dir))


def write_pair(cert_path: str, key_path: str, issued: Issued) -> None:
    """Overwrites cert_path/key_path with `issued`'s files (each replaced atomically)."""
    for src, dst in ((issued.cert_file, cert_path), (issued.key_file, key_path)):
        tmp = dst + ".tmp"
        shutil.copyfile(src, tmp)
        os.chmod(tmp, 0o600)
        os.replace(tmp, dst)


# ---------------------------------------------------------------------------- ports and probes
def free_port() -> int:
    """A loopback TCP port nobody listens on now (nginx cannot report an ephemeral port back)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tls_connect(port: int, ctx: ssl.SSLContext, server_hostname: Optional[str] = "localhost",
                timeout: float = 5.0) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        return ctx.wrap_socket(raw, server_hostname=server_hostname)
    except BaseException:
        raw.close()
        raise


def peer_certificate(port: int, ctx: ssl.SSLContext, server_hostname: Optional[str] = "localhost",
                     timeout: float = 5.0) -> x509.Certificate:
    """The certificate a new TLS connection to the port is served (the handshake must pass ctx)."""
    s = tls_connect(port, ctx, server_hostname, timeout)
    try:
        return x509.load_der_x509_certificate(s.getpeercert(binary_form=True))
    finally:
        s.close()


def wait_tls(port: int, timeout: float = 15.0, what: str = "TLS listener",
             proc: Optional[subprocess.Popen] = None, log: Optional[str] = None) -> None:
    """Waits until a TLS handshake (no verification) to 127.0.0.1:port completes."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    deadline = time.monotonic() + timeout
    last = None
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before it was ready: {_tail(log)}")
        try:
            tls_connect(port, ctx, None, timeout=2).close()
            return
        except (OSError, ssl.SSLError) as e:
            last = e
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} on port {port} not ready within {timeout}s ({last!r}): {_tail(log)}")
        time.sleep(0.05)


def _tail(path: Optional[str], n: int = 3000) -> str:
    if not path or not os.path.exists(path):
        return ""
    with open(path, "rb") as f:
        return f.read()[-n:].decode("utf-8", "replace")


# ---------------------------------------------------------------------------- nginx front
ACCESS_FORMAT = ('$request_method $request_uri $status proto=$ssl_protocol reused=$ssl_session_reused '
                 'sni=$ssl_server_name client_verify=$ssl_client_verify')


class TlsFront:
    """nginx terminating TLS on 127.0.0.1:<port> and proxying to http://127.0.0.1:<upstream_port>.

    cert: an Issued (or (cert_file, key_file)); client_ca: a CA file to require a client certificate
    signed by it (nginx refuses a missing one at the HTTP level with 400, after the handshake)."""

    def __init__(self, upstream_port: int, cert, dir, client_ca: Optional[str] = None, name: str = "front",
                 protocols: str = "TLSv1.2 TLSv1.3"):
        self.upstream_port = upstream_port
        self.cert_file, self.key_file = (cert.cert_file, cert.key_file) if isinstance(cert, Issued) else cert
        self.client_ca = client_ca
        self.protocols = protocols
        self.dir = Path(dir) / f"nginx-{name}"
        self.port = 0
        self.proc: Optional[subprocess.Popen] = None

    @property
    def error_log(self) -> str:
        return str(self.dir / "error.log")

    @property
    def access_log(self) -> str:
        return str(self.dir / "access.log")

    def url(self, host: str = "localhost") -> str:
        return f"https://{host}:{self.port}"

    def _config(self) -> str:
        d = self.dir
        verify = ""
        if self.client_ca:
            verify = (f"    ssl_verify_client on;\n"
                      f"    ssl_client_certificate {self.client_ca};\n"
                      f"    ssl_verify_depth 3;\n")
        user = "user root root;\n" if os.geteuid() == 0 else ""
        return f"""# generated by test/support/tls.py
{user}worker_processes 1;
daemon off;
master_process on;
pid {d}/nginx.pid;
error_log {d}/error.log info;
events {{ worker_connections 512; }}
http {{
  log_format rjtls '{ACCESS_FORMAT}';
  access_log {d}/access.log rjtls;
  client_body_temp_path {d}/tmp/body;
  proxy_temp_path {d}/tmp/proxy;
  fastcgi_temp_path {d}/tmp/fastcgi;
  uwsgi_temp_path {d}/tmp/uwsgi;
  scgi_temp_path {d}/tmp/scgi;
  keepalive_timeout 75s;
  keepalive_requests 100000;
  client_max_body_size 64m;
  upstream engine {{
    server 127.0.0.1:{self.upstream_port};
    keepalive 16;
  }}
  server {{
    listen 127.0.0.1:{self.port} ssl;
    ssl_certificate {self.cert_file};
    ssl_certificate_key {self.key_file};
    ssl_protocols {self.protocols};
    ssl_session_cache shared:rjtls:1m;
    ssl_session_timeout 10m;
    ssl_session_tickets on;
{verify}    location / {{
      proxy_pass http://engine;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 300s;
      proxy_send_timeout 300s;
    }}
  }}
}}
"""

    def start(self, timeout: float = 15.0) -> "TlsFront":
        for attempt in range(5):
            self.dir.mkdir(parents=True, exist_ok=True)
            (self.dir / "tmp").mkdir(exist_ok=True)
            self.port = free_port()
            conf = self.dir / "nginx.conf"
            conf.write_text(self._config())
            err = open(self.dir / "stderr", "ab")
            self.proc = subprocess.Popen([NGINX, "-p", str(self.dir), "-e", self.error_log, "-c", str(conf)],
                                         stdin=subprocess.DEVNULL, stdout=err, stderr=subprocess.STDOUT,
                                         close_fds=True)
            err.close()
            try:
                wait_tls(self.port, timeout, "nginx TLS front", self.proc, self.error_log)
                return self
            except RuntimeError:
                in_use = "Address already in use" in _tail(self.error_log, 100000)
                self.stop()
                if not in_use or attempt == 4:
                    raise
        raise AssertionError("unreachable")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()   # nginx: SIGTERM = fast shutdown
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def access_lines(self) -> list:
        try:
            return Path(self.access_log).read_text().splitlines()
        except FileNotFoundError:
            return []

    def access_entries(self) -> list:
        """The access log as dicts: method, path, status and the key=value fields."""
        out = []
        for line in self.access_lines():
            parts = line.split(" ")
            if len(parts) < 3:
                continue
            e = {"method": parts[0], "path": parts[1], "status": parts[2]}
            for p in parts[3:]:
                k, _, v = p.partition("=")
                e[k] = v
            out.append(e)
        return out

    def entries_for(self, path: str, count: int, timeout: float = 10.0) -> list:
        """The access log's entries for path once there are at least count of them (or whatever is
        there at the deadline). nginx writes a request's line when the request ends, which for a
        stream can be a moment after the client read its last event."""
        deadline = time.monotonic() + timeout
        while True:
            found = [e for e in self.access_entries() if e["path"] == path]
            if len(found) >= count or time.monotonic() > deadline:
                return found
            time.sleep(0.05)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


# ---------------------------------------------------------------------------- strict Python front
class StrictTlsFront:
    """A TLS terminator in this process that requires a client certificate in the handshake
    (ssl.CERT_REQUIRED = SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT), then relays bytes to
    127.0.0.1:<upstream_port>, one thread per connection for both directions. With TLS 1.2 a
    missing client certificate fails the client's handshake; with TLS 1.3 the client's handshake completes and the server's alert
    (certificate_required) arrives on its first read — both are TLS failures for the client.
    handshakes: list of ("ok"|"error: <reason>") per accepted connection."""

    def __init__(self, upstream_port: int, cert: Issued, client_ca: str,
                 max_version: ssl.TLSVersion = ssl.TLSVersion.MAXIMUM_SUPPORTED):
        self.upstream_port = upstream_port
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        self.ctx.maximum_version = max_version
        self.ctx.load_cert_chain(cert.cert_file, cert.key_file)
        self.ctx.load_verify_locations(client_ca)
        self.ctx.verify_mode = ssl.CERT_REQUIRED
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.handshakes: list = []
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._conns: list = []
        self._lock = threading.Lock()

    def url(self, host: str = "localhost") -> str:
        return f"https://{host}:{self.port}"

    def start(self) -> "StrictTlsFront":
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()
        return self

    def _accept(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c: socket.socket) -> None:
        c.settimeout(30)
        with self._lock:
            self._conns.append(c)
        try:
            s = self.ctx.wrap_socket(c, server_side=True)
        except (OSError, ssl.SSLError) as e:
            self.handshakes.append(f"error: {getattr(e, 'reason', None) or e}")
            # Linger so the alert reaches the client before any RST could discard it: half-close,
            # drain what the client still sends (a TLS 1.3 client already wrote its request), close.
            try:
                c.shutdown(socket.SHUT_WR)
                c.settimeout(2)
                while c.recv(65536):
                    pass
            except OSError:
                pass
            c.close()
            return
        self.handshakes.append("ok")
        try:
            up = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=30)
        except OSError:
            s.close()
            return
        with self._lock:
            self._conns += [s, up]
        self._relay(s, up)

    @staticmethod
    def _relay(s: ssl.SSLSocket, up: socket.socket) -> None:
        """Both directions from one thread: an SSL object must never be read and written from two
        threads at once (that garbles the stream)."""
        try:
            while True:
                if s.pending():
                    ready = [s]
                else:
                    ready, _, _ = select.select([s, up], [], [], 60)
                    if not ready:
                        break
                if s in ready:
                    s.settimeout(0.2)  # the readable bytes may not be a whole record yet
                    try:
                        data = s.recv(65536)
                    except (socket.timeout, ssl.SSLWantReadError):
                        data = None
                    if data == b"":
                        break
                    if data:
                        up.sendall(data)
                if up in ready:
                    data = up.recv(65536)
                    if not data:
                        break
                    s.settimeout(30)
                    s.sendall(data)
        except (OSError, ssl.SSLError):
            pass
        finally:
            for x in (s, up):
                try:
                    x.close()
                except OSError:
                    pass

    def stop(self) -> None:
        self._stop.set()
        try:
            self.sock.close()
        except OSError:
            pass
        if self._thread:
            self._thread.join(2)
        with self._lock:
            for c in self._conns:
                try:
                    c.close()
                except OSError:
                    pass


# ---------------------------------------------------------------------------- HTTPS clients
def https_request(port: int, method: str, path: str, body=None, headers=None, timeout: float = 10.0,
                  ctx: Optional[ssl.SSLContext] = None, server_hostname: str = "localhost") -> Response:
    """One request over a new TLS connection to 127.0.0.1:port (SNI/hostname `server_hostname`)."""
    conn = http.client.HTTPSConnection(server_hostname, port, timeout=timeout, context=ctx)
    # Connect to loopback whatever the name, with the name for SNI and the hostname check.
    conn.sock = tls_connect(port, ctx, server_hostname, timeout)
    return exchange(conn, method, path, body, headers)


def https_scrape(port: int, ctx: ssl.SSLContext, path: str = "/metrics") -> Metrics:
    r = https_request(port, "GET", path, timeout=10, ctx=ctx)
    assert r.status == 200, f"GET {path} over HTTPS on the metrics port answered {r.status}: {r.body[:300]!r}"
    return Metrics(r.body.decode())
