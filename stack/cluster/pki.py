"""The cluster's certificates, made locally (no openssl, no download): a CA, the API server's
serving certificate for loopback and the in-cluster names, one admin client certificate in group
system:masters (every control-plane component uses it, as kwokctl's clusters do) and the
service-account signing key. ECDSA P-256: fast to make, accepted by every component."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from contract.extras import require

VALID_DAYS = 365
API_NAMES = ("kubernetes", "kubernetes.default", "kubernetes.default.svc",
             "kubernetes.default.svc.cluster.local", "localhost")
SERVICE_IP = "10.96.0.1"  # first address of the service range the API server is given


@dataclass(frozen=True)
class Pki:
    dir: Path

    @property
    def ca_crt(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca.key"

    @property
    def server_crt(self) -> Path:
        return self.dir / "apiserver.crt"

    @property
    def server_key(self) -> Path:
        return self.dir / "apiserver.key"

    @property
    def admin_crt(self) -> Path:
        return self.dir / "admin.crt"

    @property
    def admin_key(self) -> Path:
        return self.dir / "admin.key"

    @property
    def sa_key(self) -> Path:
        return self.dir / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.dir / "sa.pub"

    def complete(self) -> bool:
        return all(p.is_file() for p in (self.ca_crt, self.ca_key, self.server_crt,
                                         self.server_key, self.admin_crt, self.admin_key,
                                         self.sa_key, self.sa_pub))


def ensure_pki(directory: Path, now: dt.datetime | None = None) -> Pki:
    """Make the certificates once; a cluster restarted later keeps its CA (kubeconfigs stay valid)."""
    pki = Pki(directory)
    if pki.complete():
        return pki
    feature = "the local cluster's certificates"
    x509 = require("cryptography.x509", "cluster", feature)
    hashes = require("cryptography.hazmat.primitives.hashes", "cluster", feature)
    serialization = require("cryptography.hazmat.primitives.serialization", "cluster", feature)
    ec = require("cryptography.hazmat.primitives.asymmetric.ec", "cluster", feature)
    oid = require("cryptography.x509.oid", "cluster", feature)
    ExtendedKeyUsageOID, NameOID = oid.ExtendedKeyUsageOID, oid.NameOID  # noqa: N806 - classes
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    start = (now or dt.datetime.now(dt.UTC)) - dt.timedelta(minutes=5)
    end = start + dt.timedelta(days=VALID_DAYS)

    def key():
        return ec.generate_private_key(ec.SECP256R1())

    def name(cn: str, org: str | None = None):
        parts = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
        if org:
            parts.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
        return x509.Name(parts)

    def write_key(path: Path, k) -> None:
        path.write_bytes(k.private_bytes(serialization.Encoding.PEM,
                                         serialization.PrivateFormat.PKCS8,
                                         serialization.NoEncryption()))
        path.chmod(0o600)

    ca_key = key()
    ca_name = name("splitstack-local-ca")
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))

    def leaf(cn: str, org: str | None, usage, sans: list | None):
        k = key()
        b = (x509.CertificateBuilder().subject_name(name(cn, org)).issuer_name(ca_name)
             .public_key(k.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(start).not_valid_after(end)
             .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
             .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
        if sans:
            b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return k, b.sign(ca_key, hashes.SHA256())

    sans: list = [x509.DNSName(n) for n in API_NAMES]
    sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in ("127.0.0.1", SERVICE_IP)]
    server_key, server = leaf("kube-apiserver", None, ExtendedKeyUsageOID.SERVER_AUTH, sans)
    admin_key, admin = leaf("splitstack-admin", "system:masters", ExtendedKeyUsageOID.CLIENT_AUTH, None)
    sa = key()
    pem = serialization.Encoding.PEM
    write_key(pki.ca_key, ca_key)
    write_key(pki.server_key, server_key)
    write_key(pki.admin_key, admin_key)
    write_key(pki.sa_key, sa)
    pki.sa_pub.write_bytes(sa.public_key().public_bytes(
        pem, serialization.PublicFormat.SubjectPublicKeyInfo))
    pki.server_crt.write_bytes(server.public_bytes(pem))
    pki.admin_crt.write_bytes(admin.public_bytes(pem))
    pki.ca_crt.write_bytes(ca.public_bytes(pem))  # last: complete() means every file is there
    return pki
