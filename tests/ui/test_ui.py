"""The management UI in a real browser: log in, every page, the queue and
exchange workflows, users and vhosts, closing a connection, the overview
chart under load, a narrow window. The `ui` fixture fails a test on any
console error, page error, failed request or HTTP error answer it did not
expect."""
import json
import subprocess
import time
import urllib.parse

import pika
import pytest

from tests.conftest import unique
from tests.ui.conftest import api, perf_command


def q(s):
    return urllib.parse.quote(s, safe="")


def stat_value(ui, box, label):
    """The number shown in a stat tile of the page."""
    return ui.page.locator(f'{box} .stat[data-label="{label}"] .value').inner_text()


def connection_name(broker, conn):
    """The broker's name for a pika connection, found by its local port."""
    port = conn._impl._transport._sock.getsockname()[1]
    return [c["name"] for c in api(broker, "GET", "/api/connections")[1] if c["peer_port"] == port][0]


def wait_text(ui, selector, text):
    ui.page.locator(selector, has_text=text).first.wait_for()


def test_login_wrong_password_then_logout(ui):
    ui.allow(r"HTTP 401: GET .*/api/whoami$")
    ui.allow(r"console: Failed to load resource: the server responded with a status of 401")
    ui.open()
    ui.page.wait_for_selector("#login-form")
    ui.shot("login")
    ui.page.fill("#username", "guest")
    ui.page.fill("#password", "not the password")
    ui.page.click("#login-form button[type=submit]")
    wait_text(ui, "#login-form .error-text", "Login failed")
    assert ui.page.evaluate("sessionStorage.getItem('lavinmq.auth')") is None
    ui.login()
    assert ui.page.inner_text("#whoami").startswith("guest")
    ui.page.wait_for_selector("#totals .stat")
    ui.page.click("#logout")
    wait_text(ui, "#login-form .error-text", "Logged out")
    ui.page.reload()
    ui.page.wait_for_selector("#login-form")     # no credentials survive the logout


def test_every_page_renders(ui, ui_broker):
    """Each page with objects to show, no console error, no failed
    request; a screenshot of each; password hashes never reach the page."""
    name, exchange, consumed = unique("ui-q"), unique("ui-x"), unique("ui-c")
    conn = pika.BlockingConnection(pika.URLParameters(ui_broker.url))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare(name, durable=True, arguments={"x-max-length": 1000})
        ch.exchange_declare(exchange, "topic", durable=True)
        ch.queue_bind(name, exchange, "orders.#")
        ch.queue_declare(consumed)
        for i in range(3):
            ch.basic_publish(exchange, "orders.new", f"message {i}".encode())
        tag = ch.basic_consume(consumed, lambda *a: None)
        assert api(ui_broker, "PUT", f"/api/policies/%2F/{name}",
                   {"pattern": "^" + name, "definition": {"max-length": 500}, "apply-to": "queues"})[0] == 201
        assert api(ui_broker, "PUT", f"/api/operator-policies/%2F/{name}",
                   {"pattern": "^" + name, "definition": {"max-length": 800}, "apply-to": "queues"})[0] == 201
        _, hash_user = api(ui_broker, "GET", "/api/users/guest")
        conn_name = connection_name(ui_broker, conn)

        ui.login()
        ui.page.wait_for_selector("#totals .stat")
        ui.shot("overview")
        pages = [
            ("#/queues", "#queues-table td a", name, "queues"),
            (f"#/queue/%2F/{q(name)}", "#queue-bindings td a", exchange, "queue"),
            ("#/exchanges", "#exchanges-table td a", exchange, "exchanges"),
            (f"#/exchange/%2F/{q(exchange)}", "#bindings-source td", name, "exchange"),
            ("#/connections", "#connections-table td a", conn_name, "connections"),
            (f"#/connection/{q(conn_name)}", "#connection-channels td a", conn_name, "connection"),
            ("#/channels", "#channels-table td a", conn_name, "channels"),
            (f"#/channel/{q(conn_name + ' (1)')}", "#channel-consumers td", tag, "channel"),
            ("#/consumers", "#consumers-table td", tag, "consumers"),
            ("#/users", "#users-table td a", "guest", "users"),
            ("#/user/guest", "#user-permissions td a", "/", "user"),
            ("#/vhosts", "#vhosts-table td a", "/", "vhosts"),
            ("#/vhost/%2F", "#vhost-permissions td a", "guest", "vhost"),
            ("#/policies", "#policies-table td", name, "policies"),
            ("#/operator-policies", "#policies-table td", name, "operator-policies"),
            ("#/definitions", "#export-definitions button", "Download", "definitions"),
            ("#/logs", ".log-table td", "started", "log"),
            ("#/nodes", "#nodes-table td", "single", "nodes"),
        ]
        for hash_, selector, text, shot in pages:
            ui.go(hash_, "main h1")
            wait_text(ui, selector, text)
            ui.page.wait_for_load_state("networkidle")
            ui.shot(shot)
            html = ui.page.content()
            assert hash_user["password_hash"] not in html and "password_hash" not in html, hash_
        # the queue page shows its counts, arguments and policy
        ui.go(f"#/queue/%2F/{q(name)}", "#queue-stats .stat")
        assert stat_value(ui, "#queue-stats", "Ready") == "3"
        assert "x-max-length" in ui.page.inner_text("#queue-details")
        ch.basic_cancel(tag)
    finally:
        conn.close()
        api(ui_broker, "DELETE", f"/api/policies/%2F/{name}")
        api(ui_broker, "DELETE", f"/api/operator-policies/%2F/{name}")


def test_queue_lifecycle_from_the_ui(ui, ui_broker):
    """Create a queue, publish to it, see it in the list, get the message
    back, purge, delete: all with the UI's forms."""
    name = unique("ui-life")
    ui.login()
    ui.go("#/queues", "#queues-table tbody tr")
    ui.page.click("#add-queue-box summary")
    ui.page.fill("#add-queue input[name=name]", name)
    ui.page.click("#add-queue button[type=submit]")
    ui.page.fill("#queues-table input.filter", name)
    ui.page.locator("#queues-table td a", has_text=name).click()
    ui.page.wait_for_selector("#queue-stats .stat")
    assert api(ui_broker, "GET", f"/api/queues/%2F/{name}")[1]["durable"] is True

    ui.page.click("#publish-box summary")
    ui.page.fill("#publish-box textarea[name=payload]", "hello from the UI")
    ui.page.click("#publish-box button[type=submit]")
    wait_text(ui, ".toast", "Message published.")
    ui.page.wait_for_function("() => document.querySelector('#queue-stats .stat[data-label=Ready] .value')"
                              ".innerText === '1'")

    ui.go("#/queues", "#queues-table tbody tr")
    ui.page.fill("#queues-table input.filter", name)
    row = ui.page.locator("#queues-table tbody tr", has_text=name)
    row.wait_for()
    ui.page.wait_for_function("n => [...document.querySelectorAll('#queues-table tbody tr')].length === 1", arg=name)
    cells = row.locator("td").all_inner_texts()
    assert cells[1] == name and cells[2] == "classic" and "1" in cells[6:9], cells  # Ready and Total show it

    row.locator("a").click()
    ui.page.wait_for_selector("#queue-stats .stat")
    ui.page.click("#get-box summary")
    ui.page.click("#get-messages button[type=submit]")
    assert ui.page.locator("#got-messages pre.payload").inner_text() == "hello from the UI"
    assert "Redelivered" in ui.page.inner_text("#got-messages")
    ui.shot("queue-get-message")
    assert api(ui_broker, "GET", f"/api/queues/%2F/{name}")[1]["messages_ready"] == 1   # requeued

    ui.page.click("#purge")
    wait_text(ui, ".toast", "Queue purged.")
    assert api(ui_broker, "GET", f"/api/queues/%2F/{name}")[1]["messages"] == 0
    ui.page.click("#delete")
    ui.page.wait_for_url("**/#/queues")
    ui.page.wait_for_selector("#queues-table tbody tr")
    assert api(ui_broker, "GET", f"/api/queues/%2F/{name}")[0] == 404
    ui.page.fill("#queues-table input.filter", name)
    wait_text(ui, "#queues-table td.empty", "No queues.")


def test_exchange_bindings_publish_and_delete(ui, ui_broker):
    exchange, queue = unique("ui-ex"), unique("ui-exq")
    assert api(ui_broker, "PUT", f"/api/queues/%2F/{queue}", {"durable": False})[0] == 201
    ui.login()
    ui.go("#/exchanges", "#exchanges-table tbody tr")
    ui.page.click("details.card summary")
    ui.page.fill("#add-exchange input[name=name]", exchange)
    ui.page.select_option("#add-exchange select[name=type]", "topic")
    ui.page.click("#add-exchange button[type=submit]")
    ui.page.fill("#exchanges-table input.filter", exchange)
    ui.page.locator("#exchanges-table td a", has_text=exchange).click()
    ui.page.wait_for_selector("#exchange-details dl")
    assert api(ui_broker, "GET", f"/api/exchanges/%2F/{exchange}")[1]["type"] == "topic"

    ui.page.fill("#bind-exchange input[name=destination]", queue)
    ui.page.fill("#bind-exchange input[name=routing_key]", "eu.#")
    ui.page.click("#bind-exchange button[type=submit]")
    wait_text(ui, "#bindings-source td", queue)
    ui.page.click("#publish-box summary")
    ui.page.fill("#publish-box input[name=routing_key]", "eu.stockholm")
    ui.page.fill("#publish-box textarea[name=payload]", "routed")
    ui.page.click("#publish-box button[type=submit]")
    wait_text(ui, ".toast", "Message published.")
    assert api(ui_broker, "GET", f"/api/queues/%2F/{queue}")[1]["messages_ready"] == 1
    ui.shot("exchange-with-binding")
    # the queue's page shows the binding the other way
    ui.go(f"#/queue/%2F/{q(queue)}", "#queue-bindings td")
    wait_text(ui, "#queue-bindings td a", exchange)
    ui.go(f"#/exchange/%2F/{q(exchange)}", "#bindings-source td")
    ui.page.click("#bindings-source button.unbind")
    wait_text(ui, "#bindings-source", "No bindings.")
    assert api(ui_broker, "GET", f"/api/exchanges/%2F/{exchange}/bindings/source")[1] == []
    ui.page.click("#delete")
    ui.page.wait_for_url("**/#/exchanges")
    assert api(ui_broker, "GET", f"/api/exchanges/%2F/{exchange}")[0] == 404
    api(ui_broker, "DELETE", f"/api/queues/%2F/{queue}")


def test_a_persistent_exchange_shows_what_it_stores_and_replays_into_a_new_binding(ui, ui_broker):
    exchange, queue = unique("ui-px"), unique("ui-pxq")
    assert api(ui_broker, "PUT", f"/api/exchanges/%2F/{exchange}",
               {"type": "fanout", "durable": False, "arguments": {"x-persist-messages": 5}})[0] == 201
    assert api(ui_broker, "PUT", f"/api/queues/%2F/{queue}", {"durable": False})[0] == 201
    for i in range(7):
        api(ui_broker, "POST", f"/api/exchanges/%2F/{exchange}/publish",
            {"routing_key": "", "payload": f"m{i}", "payload_encoding": "string", "properties": {}})
    ui.login()
    ui.go("#/exchanges", "#exchanges-table tbody tr")
    ui.page.fill("#exchanges-table input.filter", exchange)
    wait_text(ui, "#exchanges-table tr", "5 (")
    ui.go(f"#/exchange/%2F/{q(exchange)}", "#exchange-details dl")
    details = ui.page.locator("#exchange-details").inner_text()
    assert "Stored messages" in details and "3 – 7" in details and "5 messages" in details
    # a binding asks for the two newest with the form's x-tail button
    ui.page.fill("#bind-exchange input[name=destination]", queue)
    ui.page.click("#bind-exchange .tag-buttons button:has-text('x-tail')")
    ui.page.locator("#bind-exchange .args-editor .row .v").first.fill("2")
    ui.page.click("#bind-exchange button[type=submit]")
    wait_text(ui, "#bindings-source td", queue)
    ui.shot("persistent-exchange")
    assert api(ui_broker, "GET", f"/api/queues/%2F/{queue}")[1]["messages_ready"] == 2
    api(ui_broker, "DELETE", f"/api/exchanges/%2F/{exchange}")
    api(ui_broker, "DELETE", f"/api/queues/%2F/{queue}")


def test_users_vhosts_and_a_management_user_sees_only_their_vhost(ui_factory, ui_broker):
    vhost, other, user = unique("ui-vh"), unique("ui-other"), unique("ui-user")
    admin = ui_factory()
    admin.login()
    admin.go("#/vhosts", "#vhosts-table tbody tr")
    for v in (vhost, other):
        admin.page.fill("#add-vhost input[name=name]", v)
        admin.page.click("#add-vhost button[type=submit]")
        wait_text(admin, "#vhosts-table td a", v)
    admin.go("#/users", "#users-table tbody tr")
    admin.page.fill("#add-user input[name=username]", user)
    admin.page.fill("#add-user input[name=password]", "first-pass")
    admin.page.click("#add-user button:has-text('management')")
    admin.page.click("#add-user button[type=submit]")
    admin.page.locator("#users-table td a", has_text=user).click()
    admin.page.wait_for_selector("#user-details dl")
    admin.page.select_option("#set-permission select[name=vhost]", vhost)
    admin.page.click("#set-permission button[type=submit]")
    wait_text(admin, "#user-permissions td a", vhost)
    # a new password from the edit form; the tags stay
    admin.page.fill("#edit-user input[name=password]", "second-pass")
    admin.page.click("#edit-user button[type=submit]")
    wait_text(admin, ".toast", "updated")
    admin.shot("user-with-permission")
    # vhost limits from the vhost's page
    admin.go(f"#/vhost/{q(vhost)}", "#vhost-stats .stat")
    admin.page.select_option("#set-limit select[name=limit]", "max-queues")
    admin.page.fill("#set-limit input[name=value]", "50")
    admin.page.click("#set-limit button[type=submit]")
    wait_text(admin, "#vhost-limits td", "max-queues")
    assert api(ui_broker, "GET", f"/api/vhosts/{q(vhost)}")[1]["limits"] == {"max-queues": 50}
    admin.shot("vhost-with-limit")

    mine, theirs = unique("ui-mine"), unique("ui-theirs")
    assert api(ui_broker, "PUT", f"/api/queues/{q(vhost)}/{mine}", {})[0] == 201
    assert api(ui_broker, "PUT", f"/api/queues/{q(other)}/{theirs}", {})[0] == 201

    member = ui_factory()
    member.login(user, "second-pass")
    assert "(management)" in member.page.inner_text("#whoami")
    member.page.wait_for_selector("#totals .stat")
    nav = member.page.inner_text("nav")
    assert "Users" not in nav and "Definitions" not in nav and "Queues" in nav
    member.page.wait_for_function("() => document.querySelectorAll('#vhost-filter option').length > 1")
    options = member.page.locator("#vhost-filter option").all_inner_texts()
    assert options == ["All vhosts", vhost]
    member.go("#/queues", "#queues-table tbody tr")
    wait_text(member, "#queues-table td a", mine)
    listed = member.page.locator("#queues-table tbody tr").all_inner_texts()
    assert len(listed) == 1 and theirs not in listed[0]
    member.shot("management-user-queues")
    member.go("#/exchanges", "#exchanges-table tbody tr")
    member.go("#/connections", "#connections-table tbody tr")

    member.page.click("#logout")
    member.page.wait_for_selector("#login-form")
    # the administrator deletes the user and the vhosts from the UI
    admin.go(f"#/user/{q(user)}", "#user-details dl")
    admin.page.click("#delete")
    admin.page.wait_for_url("**/#/users")
    assert api(ui_broker, "GET", f"/api/users/{user}")[0] == 404
    for v in (vhost, other):
        admin.go(f"#/vhost/{q(v)}", "#vhost-stats .stat")
        admin.page.click("#delete")
        admin.page.wait_for_url("**/#/vhosts")
        assert api(ui_broker, "GET", f"/api/vhosts/{q(v)}")[0] == 404


def test_close_connection_and_the_client_gets_the_reason(ui, ui_broker):
    conn = pika.BlockingConnection(pika.URLParameters(ui_broker.url))
    try:
        conn.channel()
        name = connection_name(ui_broker, conn)
        ui.login()
        ui.go("#/connections", "#connections-table tbody tr")
        ui.page.locator("#connections-table td a", has_text=name).click()
        ui.page.wait_for_selector("#connection-details dl")
        ui.shot("connection-before-close")
        ui.page.fill("#close-connection input[name=reason]", "maintenance window from the UI")
        ui.page.click("#close-connection button[type=submit]")
        ui.page.wait_for_url("**/#/connections")
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
            for _ in range(100):
                conn.process_data_events(time_limit=0.1)
        assert info.value.reply_code == 320
        assert "maintenance window from the UI" in info.value.reply_text
    finally:
        if conn.is_open:
            conn.close()


def test_overview_chart_draws_while_lavinmqperf_runs(ui, ui_broker):
    ui.login()
    ui.page.wait_for_selector("#chart-rates svg")
    perf = subprocess.Popen([*perf_command(), "throughput", "--uri", ui_broker.url, "-z", "12", "-s", "64", "-r", "20000"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        ui.page.wait_for_function(
            """() => { const l = document.querySelector('#chart-rates polyline[data-series="Publish"]')
                       return l && Number(l.dataset.count) >= 3 && Number(l.dataset.max) > 100 }""", timeout=30_000)
        # the line has several points, and the load shows as >100 messages/s
        ui.shot("overview-under-load")
    finally:
        out, _ = perf.communicate(timeout=60)
    assert perf.returncode == 0, out.decode(errors="replace")[-2000:]


def test_policies_operator_policies_and_definitions(ui, ui_broker, tmp_path):
    policy = unique("ui-pol")
    ui.login()
    for route, api_path in (("#/policies", "policies"), ("#/operator-policies", "operator-policies")):
        ui.go(route, "#policies-table tbody tr")
        ui.page.fill("#add-policy input[name=name]", policy)
        ui.page.fill("#add-policy input[name=pattern]", "^ui-pol")
        ui.page.fill("#add-policy .args-editor .k", "max-length")
        ui.page.fill("#add-policy .args-editor .v", "10")
        ui.page.select_option("#add-policy .args-editor select", "number")
        ui.page.click("#add-policy button[type=submit]")
        wait_text(ui, "#policies-table td", policy)
        status, body = api(ui_broker, "GET", f"/api/{api_path}/%2F/{policy}")
        assert status == 200 and body["definition"] == {"max-length": 10}, body
        ui.page.locator("#policies-table tr", has_text=policy).locator("button.delete-policy").click()
        wait_text(ui, ".toast", "deleted")
        assert api(ui_broker, "GET", f"/api/{api_path}/%2F/{policy}")[0] == 404

    # export downloads the broker's definitions; import uploads a file
    kept = unique("ui-kept")
    assert api(ui_broker, "PUT", f"/api/queues/%2F/{kept}", {"durable": True})[0] == 201
    ui.go("#/definitions", "#export-definitions")
    with ui.page.expect_download() as dl:
        ui.page.click("#export-definitions button[type=submit]")
    exported = json.loads(open(dl.value.path()).read())
    assert kept in [x["name"] for x in exported["queues"]]
    assert dl.value.suggested_filename.startswith("lavinmq-definitions")
    imported = unique("ui-imported")
    path = tmp_path / "defs.json"
    path.write_text(json.dumps({"queues": [{"name": imported, "vhost": "/", "durable": True,
                                            "auto_delete": False, "arguments": {}}]}))
    ui.page.set_input_files("#import-definitions input[type=file]", str(path))
    ui.page.click("#import-definitions button[type=submit]")
    wait_text(ui, ".toast", "imported")
    assert api(ui_broker, "GET", f"/api/queues/%2F/{imported}")[0] == 200


def test_narrow_window(ui_factory, ui_broker):
    ui = ui_factory(viewport=(390, 844))
    ui.login()
    ui.page.wait_for_selector("#totals .stat")
    assert not ui.page.is_visible(".sidebar")
    ui.page.click(".menu-toggle")
    assert ui.page.is_visible(".sidebar")
    ui.shot("narrow-menu")
    ui.page.click(".sidebar a[data-route=queues]")
    ui.page.wait_for_selector("#queues-table tbody tr")
    assert not ui.page.is_visible(".sidebar")
    # the page itself does not scroll sideways: wide tables scroll in their box
    width = ui.page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
    assert width <= 1, width
    ui.shot("narrow-queues")
    ui.go("#/", "#chart-rates svg")
    ui.shot("narrow-overview")
    assert ui.page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth") <= 1


def test_login_survives_reload_and_api_errors_show_as_messages(ui, ui_broker):
    ui.login()
    ui.go("#/queues", "#queues-table tbody tr")
    ui.page.reload()
    ui.page.wait_for_selector("#queues-table tbody tr")        # same tab: still logged in
    # a declare the broker refuses shows the broker's reason, not a crash
    ui.allow(r"HTTP 40[03]: PUT .*/api/queues/%2F/amq\.")
    ui.allow(r"console: Failed to load resource: the server responded with a status of 40[03]")
    ui.page.click("#add-queue-box summary")
    ui.page.fill("#add-queue input[name=name]", "amq.reserved")
    ui.page.click("#add-queue button[type=submit]")
    wait_text(ui, ".toast.error", "amq.")
    time.sleep(0.2)
