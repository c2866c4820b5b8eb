"""The management UI's OAuth sign-in in a real browser: the "Sign in with
OAuth" button, the issuer (a local one the test serves) approving, the
broker's callback setting the session cookie, the UI resuming it, and
logging out."""
import pytest

from tests.conftest import BrokerProcess
from tests.parity.oauth_issuer import Issuer


@pytest.fixture
def oauth_broker(tmp_path):
    issuer = Issuer()
    issuer.login_claims = {"sub": "frank", "scope": "lavinmq.tag:administrator lavinmq.read:*/*"}
    b = BrokerProcess(tmp_path / "data")
    ini = tmp_path / "lavinmq.ini"
    ini.write_text(f"[main]\nauth_backends = local,oauth\n[oauth]\nissuer = {issuer.url}\n"
                   f"resource_server_id = lavinmq\nclient_id = lavinmq-ui\n"
                   f"mgmt_base_url = http://127.0.0.1:{b.http_port}\n")
    b.extra_args += ["-c", str(ini)]
    b.start()
    yield b
    b.stop()
    issuer.close()


def test_sign_in_with_oauth(ui_factory, oauth_broker):
    ui = ui_factory(broker=oauth_broker)
    ui.open()
    ui.page.wait_for_selector("#oauth-login")
    ui.shot("oauth-login")
    ui.page.click("#oauth-login")
    ui.page.wait_for_selector("#whoami")
    assert ui.page.inner_text("#whoami").startswith("frank")
    ui.page.wait_for_selector("#totals .stat")          # the overview loads with the cookie session
    ui.shot("oauth-signed-in")
    ui.page.click("#logout")
    ui.page.wait_for_selector("#login-form")
    ui.page.reload()
    ui.page.wait_for_selector("#login-form")            # the session cookie is gone
    assert not any(c["name"] == "oauth_token" for c in ui.context.cookies())
