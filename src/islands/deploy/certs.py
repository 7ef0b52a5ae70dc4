"""Certificates for a federation: one certificate authority, one key pair per party.

Mutual TLS is how parties of a deployed federation know each other: every party holds
the federation's CA certificate, its own private key and a certificate the CA signed for
its party name (as common name and as a DNS subject-alternative name). A party accepts a
connection only from a peer whose certificate chains to that CA, and reads the peer's
party name from it, so a message claiming to come from ``bank`` is refused unless the
TLS peer is ``bank`` (:mod:`islands.runtime.grpc_transport`).

Keys are ECDSA on P-256 made by :mod:`cryptography` (OpenSSL's CSPRNG); private keys are
written with mode 0600 and never printed. Whoever runs ``islands certs`` holds the CA
key: in a real federation that is the operator, who keeps ``ca.key`` offline and hands
each party only ``ca.pem`` and its own ``<name>.pem``/``<name>.key``, over a channel
the parties already trust.
"""

from __future__ import annotations

import datetime as dt
import os
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric import ec

from islands.errors import ValidationError
from islands.runtime.party import check_party_names
from islands.runtime.tls import TlsFiles, check_tls, party_name_of

__all__ = ["CertFiles", "TlsFiles", "check_tls", "make_certificates", "party_name_of"]


@dataclass(frozen=True)
class CertFiles:
    """The files :func:`make_certificates` wrote."""

    ca_cert: Path
    ca_key: Path
    parties: dict[str, TlsFiles]


def _key() -> ec.EllipticCurvePrivateKey:

    return ec.generate_private_key(ec.SECP256R1())


def _write(path: Path, data: bytes, *, private: bool) -> None:
    """Write a new file beside ``path`` (never through a link) and move it into place.

    A private key is created with mode 0600 from the start, so it is never readable by
    others, even for a moment, even when it replaces a file that was.
    """
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(tmp, flags, 0o600 if private else 0o644)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def make_certificates(parties: Iterable[str], out: str | os.PathLike[str], *,
                      days: int = 365, federation: str = "islands federation",
                      overwrite: bool = False) -> CertFiles:
    """Create a CA and one key and CA-signed certificate per party in ``out``.

    Writes ``ca.pem``, ``ca.key`` and, per party, ``<name>.pem`` and ``<name>.key``.

    Parameters
    ----------
    parties
        Party names (as in the federation description).
    out
        Folder to write into (created if missing).
    days
        Validity of every certificate.
    federation
        The CA's common name.
    overwrite
        Replace existing files; by default an existing file is an error.

    Returns
    -------
    CertFiles
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    names = check_party_names(parties)
    if isinstance(days, bool) or not isinstance(days, int) or days < 1:
        raise ValidationError(f"The 'days' parameter must be an int >= 1. Got {days!r} instead.")
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    targets = [folder / "ca.pem", folder / "ca.key"]
    for name in names:
        targets += [folder / f"{name}.pem", folder / f"{name}.key"]
    existing = [str(p) for p in targets if p.exists()]
    if existing and not overwrite:
        raise ValidationError(f"refusing to overwrite {existing} (pass overwrite=True / --force)")

    now = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)
    until = now + dt.timedelta(days=days)
    ca_key = _key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, federation)])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now).not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=False, content_commitment=False, key_encipherment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=True,
            crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    _write(folder / "ca.pem", ca_cert.public_bytes(pem), private=False)
    _write(folder / "ca.key", ca_key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()), private=True)

    files: dict[str, TlsFiles] = {}
    for name in names:
        key = _key()
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(until)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        cert_path, key_path = folder / f"{name}.pem", folder / f"{name}.key"
        _write(cert_path, cert.public_bytes(pem), private=False)
        _write(key_path, key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()), private=True)
        files[name] = TlsFiles(ca=folder / "ca.pem", cert=cert_path, key=key_path)
    return CertFiles(ca_cert=folder / "ca.pem", ca_key=folder / "ca.key", parties=files)
