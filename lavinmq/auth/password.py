"""RabbitMQ-compatible password hashes: base64(4-byte salt + H(salt + password))."""
import base64
import hashlib
import hmac
import os

ALGORITHMS = {
    "rabbit_password_hashing_sha256": hashlib.sha256,
    "rabbit_password_hashing_sha512": hashlib.sha512,
    "rabbit_password_hashing_md5": hashlib.md5,
    "sha256": hashlib.sha256,
    "sha512": hashlib.sha512,
    "md5": hashlib.md5,
}


def _digest(algorithm):
    try:
        return ALGORITHMS[algorithm.lower()]
    except KeyError:
        raise ValueError(f"unknown password hashing algorithm {algorithm!r}") from None


def hash_password(password, algorithm="sha256"):
    salt = os.urandom(4)
    return base64.b64encode(salt + _digest(algorithm)(salt + password.encode()).digest()).decode()


def verify(password, password_hash, algorithm="sha256"):
    try:
        raw = base64.b64decode(password_hash, validate=True)
    except (ValueError, TypeError):
        return False
    if len(raw) < 5:
        return False
    salt, expected = raw[:4], raw[4:]
    return hmac.compare_digest(_digest(algorithm)(salt + password.encode()).digest(), expected)
