"""toolq in your own integration tests: a real stack (Redis, gateway, worker) in containers.

    from toolq.testing import Rule, ToolqStack

    with ToolqStack([Rule("weather", "It is sunny.")]) as stack:
        client = stack.sync_client()          # or stack.client() (async), stack.openai_base_url

The pytest plugin (toolq/testing/plugin.py) offers the same as fixtures: ``toolq_stack``,
``toolq_client``, ``toolq_rules``. Needs ``pip install 'toolq[testing]'``, a Docker engine and the
images of docker-compose.yml (toolq/testing/images.py says how to get each).
"""

from toolq.testing.engine import docker_unavailable
from toolq.testing.images import ImageMissing
from toolq.testing.stack import Rule, StackFailed, ToolqStack

__all__ = ["ImageMissing", "Rule", "StackFailed", "ToolqStack", "docker_unavailable"]
