"""A local OAuth 2.0 / OpenID Connect issuer for the tests: discovery, a
JWKS (its fetches counted, its Cache-Control settable), an authorization
endpoint that approves at once (PKCE recorded) and a token endpoint that
checks the code verifier. Tokens are RS256 JWTs signed with PyJWT."""
import base64
import hashlib
import http.server
import json
import secrets
import threading
import time
import urllib.parse

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa


class Issuer:
    def __init__(self):
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = "test-key-1"
        self.jwks_fetches = 0
        self.max_age = None             # Cache-Control: max-age of the JWKS answer
        self.jwks_delay = 0.0           # seconds the JWKS answer takes
        self.codes = {}                 # code -> (challenge, redirect_uri, claims)
        self.login_claims = {}          # what /authorize signs the user in as
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def token(self, sub="alice", scope="", lifetime=3600, kid=None, key=None, aud="lavinmq", iss=None,
              alg="RS256", **extra):
        now = int(time.time())
        claims = {"iss": iss or self.url, "sub": sub, "aud": aud, "iat": now, "exp": now + lifetime,
                  "scope": scope, **extra}
        if aud is None:
            claims.pop("aud")
        headers = {"kid": kid or self.kid}
        if alg == "HS256":
            return jwt.encode(claims, "secret-shared-by-nobody-but-long-enough", algorithm="HS256", headers=headers)
        pem = (key or self.key).private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption())
        return jwt.encode(claims, pem, algorithm="RS256", headers=headers)

    def jwks(self):
        pub = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        pub.update(kid=self.kid, use="sig", alg="RS256")
        return {"keys": [pub, {"kty": "EC", "use": "sig", "kid": "ec-ignored", "crv": "P-256", "x": "x", "y": "y"}]}

    def _handler(self):
        issuer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _json(self, body, status=200, headers=()):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers:
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                u = urllib.parse.urlsplit(self.path)
                q = dict(urllib.parse.parse_qsl(u.query))
                if u.path == "/.well-known/openid-configuration":
                    return self._json({"issuer": issuer.url, "jwks_uri": issuer.url + "/jwks",
                                       "authorization_endpoint": issuer.url + "/authorize",
                                       "token_endpoint": issuer.url + "/token"})
                if u.path == "/jwks":
                    time.sleep(issuer.jwks_delay)
                    issuer.jwks_fetches += 1
                    headers = [("Cache-Control", f"public, max-age={issuer.max_age}")] if issuer.max_age else []
                    return self._json(issuer.jwks(), headers=headers)
                if u.path == "/authorize":
                    # the user signs in and approves at once
                    code = secrets.token_urlsafe(16)
                    issuer.codes[code] = (q.get("code_challenge"), q.get("redirect_uri"), dict(issuer.login_claims))
                    back = q["redirect_uri"] + "?" + urllib.parse.urlencode({"code": code, "state": q.get("state")})
                    self.send_response(302)
                    self.send_header("Location", back)
                    self.end_headers()
                    return
                self._json({"error": "not found"}, 404)

            def do_POST(self):
                n = int(self.headers.get("Content-Length", 0))
                form = dict(urllib.parse.parse_qsl(self.rfile.read(n).decode()))
                if self.path != "/token" or form.get("grant_type") != "authorization_code":
                    return self._json({"error": "invalid_request"}, 400)
                entry = issuer.codes.pop(form.get("code"), None)
                if entry is None:
                    return self._json({"error": "invalid_grant"}, 400)
                challenge, redirect_uri, claims = entry
                verifier = form.get("code_verifier", "")
                want = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
                if want != challenge or redirect_uri != form.get("redirect_uri"):
                    return self._json({"error": "invalid_grant"}, 400)
                return self._json({"access_token": issuer.token(**claims), "token_type": "Bearer",
                                   "expires_in": "3600"})     # a string, as Entra ID sends it
        return Handler
