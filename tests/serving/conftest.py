"""The loopback API server of the cluster tests, for the server's background audit."""

from tests.cluster.conftest import fake_api  # noqa: F401 - a fixture, found by pytest here
