from tests.security.conftest import make_broker  # noqa: F401  (the same broker factory)
