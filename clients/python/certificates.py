"""Certificates made at run time for the TLS tests (with the `cryptography` package of
requirements.txt): a certificate authority, and the server and client certificates it issues,
as PEM files in a directory of the caller's. Nothing here is for production: the keys are
written unencrypted and live for a day.
"""

import datetime
import ipaddress
import pathlib

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _name(common_name):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key_usage(*, sign_certificates):
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=sign_certificates,
        crl_sign=sign_certificates,
        encipher_only=False,
        decipher_only=False,
    )


def _write(path, data):
    path.write_bytes(data)
    return path


class Authority:
    """A self-signed certificate authority; `file` is its certificate (PEM), what a client
    trusts (`root_certificates`) or a server accepts client certificates of
    (`server.tls.client_ca_file`)."""

    def __init__(self, directory, name):
        self.directory = pathlib.Path(directory)
        self.stem = name.replace(" ", "-")
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.name = _name(name)
        public = self.key.public_key()
        self.cert = (
            self._builder(self.name, public)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(_key_usage(sign_certificates=True), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        self.file = _write(
            self.directory / f"{self.stem}.pem", self.cert.public_bytes(serialization.Encoding.PEM)
        )

    def _builder(self, subject, public):
        now = datetime.datetime.now(datetime.timezone.utc)
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.name)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            # A minute back, for a clock a little behind this one's.
            .not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(days=1))
        )

    def issue(self, stem, *, server):
        """A certificate and its key, (cert_file, key_file): for a server (`localhost` and
        127.0.0.1, `serverAuth`) or for a client (`clientAuth`)."""
        key = ec.generate_private_key(ec.SECP256R1())
        if server:
            names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            usage = ExtendedKeyUsageOID.SERVER_AUTH
        else:
            names = [x509.DNSName(stem)]
            usage = ExtendedKeyUsageOID.CLIENT_AUTH
        issuer_ski = self.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier)
        cert = (
            self._builder(_name(stem), key.public_key())
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(sign_certificates=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(issuer_ski.value),
                critical=False,
            )
            .sign(self.key, hashes.SHA256())
        )
        cert_file = _write(
            self.directory / f"{stem}.pem", cert.public_bytes(serialization.Encoding.PEM)
        )
        key_file = _write(
            self.directory / f"{stem}-key.pem",
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
        )
        return cert_file, key_file
