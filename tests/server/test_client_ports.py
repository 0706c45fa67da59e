"""dpsql's client pointed at the wrong port of a dpsql server."""
# ruff: noqa: F811 (the imported server fixture is requested by name as a parameter)

from __future__ import annotations

import pytest
from server_harness import server  # noqa: F401 - the fixture

import dpsql


def test_a_url_naming_the_http_port_says_which_port_to_name(server):
    """libpq's 'received invalid response to SSL negotiation: H' was all a user read."""
    url = server.url("dave").replace(f":{server.pg_port}/", f":{server.http_port}/")
    with pytest.raises(dpsql.OperationalError) as refused:
        dpsql.connect(url)
    assert "PostgreSQL port" in refused.value.hint
