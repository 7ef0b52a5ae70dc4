"""The TLS files of one party and the checks a party runs on them before it listens.

A party of a deployed federation holds the federation's CA certificate, its own private
key and the certificate the CA issued to its party name
(:func:`islands.deploy.certs.make_certificates` makes them). The transport
(:mod:`islands.runtime.grpc_transport`) reads and checks them here, so the runtime needs
nothing from the deployment layer above it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from islands.errors import ValidationError

__all__ = ["TlsFiles", "check_tls", "party_name_of"]


@dataclass(frozen=True)
class TlsFiles:
    """What one party needs for mutual TLS: the CA certificate, its key and certificate.

    Attributes
    ----------
    ca, cert, key
        PEM file paths.
    """

    ca: Path
    cert: Path
    key: Path

    def read(self) -> tuple[bytes, bytes, bytes]:
        """Return the three PEM files' bytes, with a clear error for a missing one."""
        out = []
        for what, path in (("CA certificate", self.ca), ("certificate", self.cert),
                           ("private key", self.key)):
            try:
                out.append(Path(path).read_bytes())
            except FileNotFoundError:
                raise ValidationError(
                    f"the {what} file {str(path)!r} does not exist (make the federation's "
                    "certificates with `islands certs --parties ... --out DIR`)") from None
            except OSError as exc:
                raise ValidationError(f"cannot read the {what} file {str(path)!r}: {exc}") \
                    from None
        return out[0], out[1], out[2]


def party_name_of(cert_pem: bytes) -> str:
    """Return the party name a certificate was issued to (its DNS SAN, else its CN)."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError as exc:
        raise ValidationError(f"not a PEM certificate: {exc}") from None
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        dns = san.value.get_values_for_type(x509.DNSName)
        if dns:
            return str(dns[0])
    except x509.ExtensionNotFound:
        pass
    cns = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if not cns:
        raise ValidationError("the certificate names no party (no DNS SAN, no common name)")
    return str(cns[0].value)


def check_tls(files: TlsFiles, name: str) -> None:
    """Check a party's TLS files before it listens, with an error that says what is wrong.

    The certificate must parse, match the private key, be signed by the CA, be valid
    now and be issued to party ``name``; otherwise the failure would show only as an
    unexplained refused connection at the peers.

    Raises
    ------
    ValidationError
        Naming the file and the problem.
    """
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import serialization

    ca_pem, cert_pem, key_pem = files.read()
    try:
        ca = x509.load_pem_x509_certificate(ca_pem)
    except ValueError:
        raise ValidationError(f"the CA certificate {str(files.ca)!r} is not a PEM "
                              "certificate") from None
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError:
        raise ValidationError(f"the certificate {str(files.cert)!r} is not a PEM "
                              "certificate") from None
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        raise ValidationError(f"the private key {str(files.key)!r} is not an unencrypted PEM "
                              "private key") from None
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    if key.public_key().public_bytes(der, public) != cert.public_key().public_bytes(der, public):
        raise ValidationError(f"the private key {str(files.key)!r} does not belong to the "
                              f"certificate {str(files.cert)!r}")
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        raise ValidationError(f"the certificate {str(files.cert)!r} was not issued by the CA "
                              f"{str(files.ca)!r}") from None
    now = dt.datetime.now(dt.timezone.utc)
    if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
        start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
        raise ValidationError(f"the certificate {str(files.cert)!r} is valid from "
                              f"{start:%Y-%m-%d} to {end:%Y-%m-%d}, not now")
    owner = party_name_of(cert_pem)
    if owner != name:
        raise ValidationError(f"the certificate {str(files.cert)!r} was issued to party "
                              f"{owner!r}, not {name!r}")
