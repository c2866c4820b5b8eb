"""RabbitMQ-compatible password hashes, so users.json and imported
definitions work in both brokers:

    base64(salt + H(salt + utf8(password)))

with a 4-byte random salt and H one of SHA-256 (the default), SHA-512 or
MD5, named ``rabbit_password_hashing_sha256`` etc. On reading, the salt is
whatever precedes the digest, and an old LavinMQ "$5$"-style prefix is
dropped."""
import base64
import binascii
import hashlib
import hmac
import os

SALT_SIZE = 4

# canonical name -> (hash constructor, digest size, LavinMQ's old prefix)
ALGORITHMS = {
    "rabbit_password_hashing_sha256": (hashlib.sha256, 32, "$5$"),
    "rabbit_password_hashing_sha512": (hashlib.sha512, 64, "$6$"),
    "rabbit_password_hashing_md5": (hashlib.md5, 16, "$1$"),
}


def algorithm_name(algorithm: str) -> str:
    """The canonical name for "sha256", "SHA256", "rabbit_password_hashing_sha256"...
    (anything ending in the hash's name, case-insensitive, as LavinMQ accepts)."""
    low = (algorithm or "").lower()
    for name in ALGORITHMS:
        if low.endswith(name.rsplit("_", 1)[1]):
            return name
    raise ValueError(f"unknown password hashing algorithm {algorithm!r}")


def _encode(password) -> bytes:
    return password if isinstance(password, (bytes, bytearray)) else password.encode("utf-8")


def hash_password(password: str | bytes, algorithm: str = "sha256") -> str:
    digest = ALGORITHMS[algorithm_name(algorithm)][0]
    salt = os.urandom(SALT_SIZE)
    return base64.b64encode(salt + digest(salt + _encode(password)).digest()).decode("ascii")


def _split(password_hash: str, algorithm: str):
    """(hash constructor, salt, digest); ValueError if the hash is malformed."""
    digest, size, prefix = ALGORITHMS[algorithm_name(algorithm)]
    if not isinstance(password_hash, str):
        raise ValueError("password hash must be a string")
    if password_hash.startswith(prefix):
        password_hash = password_hash[len(prefix):]
    try:
        raw = base64.b64decode(password_hash, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("password hash is not valid base64") from None
    if len(raw) < size:
        raise ValueError(f"password hash is {len(raw)} bytes, shorter than a {algorithm_name(algorithm)} digest")
    return digest, raw[:-size], raw[-size:]


def check_hash(password_hash: str, algorithm: str = "sha256") -> None:
    """Raise ValueError naming the problem if the hash can never verify."""
    _split(password_hash, algorithm)


def verify(password: str | bytes, password_hash: str, algorithm: str = "sha256") -> bool:
    """True if the password matches. A malformed hash or unknown algorithm is
    just a failed login here; loading users.json reports those."""
    try:
        digest, salt, expected = _split(password_hash, algorithm)
    except ValueError:
        return False
    # compare_digest: the time taken must not tell how many bytes matched
    return hmac.compare_digest(digest(salt + _encode(password)).digest(), expected)
