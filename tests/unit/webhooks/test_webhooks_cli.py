"""`toolq webhooks`: bad settings and unreachable Redis are one line on stderr, never a traceback;
listing and resending failed deliveries from the command line."""

from __future__ import annotations

import json

from tests.unit.commands.test_cli import assert_one_line, toolq
from toolq.local import free_port


def test_a_bad_secret_is_one_line():
    done = toolq("webhooks", env={"TOOLQ_WEBHOOK_SECRETS": json.dumps({"t": ["whsec_short"]})})
    assert_one_line(done, "invalid setting", "tenant 't'")


def test_secrets_that_are_not_json_are_one_line():
    assert_one_line(toolq("webhooks", env={"TOOLQ_WEBHOOK_SECRETS": "t:whsec_x"}), "invalid setting")


def test_a_lease_shorter_than_an_attempt_is_refused():
    done = toolq("webhooks", env={"TOOLQ_WEBHOOK_TIMEOUT_S": "30", "TOOLQ_WEBHOOK_LEASE_S": "10"})
    assert_one_line(done, "lease_s must exceed timeout_s")


def test_a_bad_redis_url_is_one_line():
    assert_one_line(toolq("webhooks", "--redis", "notaurl"), "bad Redis URL")
    assert_one_line(toolq("webhooks", "--redis", "notaurl", "failed"), "bad Redis URL")


def test_an_unreachable_redis_is_one_line():
    assert_one_line(toolq("webhooks", "--redis", f"redis://127.0.0.1:{free_port()}", "failed"), "cannot reach Redis")


def test_resending_a_delivery_that_does_not_exist(redis_url):
    done = toolq("webhooks", "--redis", redis_url, "redeliver", "msg_nope", "--tenant", "t")
    assert_one_line(done, "no delivery 'msg_nope' for tenant 't'")
    listed = toolq("webhooks", "--redis", redis_url, "failed", "--tenant", "t")
    assert listed.returncode == 0 and listed.stdout == "", listed.stderr
