"""Datasets the service cannot account for are refused when it starts, naming what to change;
the settings of ``server.yaml`` are checked and do what they say."""

from __future__ import annotations

import threading
import time

import pytest
import yaml
from server_harness import start_server, write_config
from test_hardening import slow_outcome

from dpsql.server.config import ServerConfigError, load_config
from dpsql.server.service import Service


def _edit(path, change) -> None:
    raw = yaml.safe_load(path.read_text())
    change(raw)
    path.write_text(yaml.safe_dump(raw))


def test_a_dataset_key_other_than_its_metadata_name_is_refused(tmp_path):
    # the engine charged under 'visits' and the service read 'shop': every spend was invisible
    config = write_config(tmp_path, analysts=["alice"])

    def rename(raw):
        raw["datasets"] = {"shop": raw["datasets"]["visits"]}
        raw["analysts"]["alice"]["budgets"] = {"shop": {"epsilon": 1.0}}

    _edit(config, rename)
    with pytest.raises(ServerConfigError, match=r"datasets\.shop: its metadata names the dataset "
                                          r"'visits'.*rename the key .* to 'visits', or set "
                                          r"'name: shop' in the metadata"):
        Service(load_config(config))


@pytest.mark.parametrize("budget", [{"rho": 1.0}, {"epsilon": 10.0, "delta": 1e-6}])
def test_a_gaussian_dataset_is_refused_saying_why(tmp_path, budget):
    # it was refused as "alice's budget on 'visits' is larger than the dataset's total ρ=1"
    config = write_config(tmp_path, analysts=["alice"])

    def gaussian(raw):
        raw.update(mechanism="gaussian", budget=budget)

    _edit(tmp_path / "private-metadata" / "visits.yaml", gaussian)
    with pytest.raises(ServerConfigError, match="dpsql serve serves ε-DP \\(Laplace\\) datasets; "
                                          "'visits' uses Gaussian noise"):
        Service(load_config(config))


@pytest.mark.parametrize("threads, setting, expected", [
    (8, None, 2), (2, None, 1), (16, None, 4), (8, 8, 8), (8, 1, 1), (3, 3, 3)])
def test_threads_per_analyst_defaults_to_a_quarter_of_threads(tmp_path, threads, setting,
                                                               expected):
    config = write_config(tmp_path, analysts=["alice"])

    def set_threads(raw):
        raw["threads"] = threads
        if setting is not None:
            raw["threads_per_analyst"] = setting

    _edit(config, set_threads)
    assert load_config(config).threads_per_analyst == expected


@pytest.mark.parametrize("setting, message", [
    (0, "threads_per_analyst must be a positive integer, got 0"),
    (-1, "threads_per_analyst must be a positive integer"),
    (1.5, "threads_per_analyst must be a positive integer"),
    ("2", "threads_per_analyst must be a positive integer"),
    (True, "threads_per_analyst must be a positive integer"),
    (9, r"threads_per_analyst \(9\) must be at most threads \(8\)")])
def test_threads_per_analyst_is_checked(tmp_path, setting, message):
    config = write_config(tmp_path, analysts=["alice"])
    _edit(config, lambda raw: raw.update(threads=8, threads_per_analyst=setting))
    with pytest.raises(ServerConfigError, match=message):
        load_config(config)


def test_threads_per_analyst_lets_one_analyst_run_that_many_at_once(tmp_path):
    """It was max(1, threads // 4) whatever the configuration said: with threads 4 and
    threads_per_analyst 2, the second of two slow queries was refused (53300)."""
    config = write_config(tmp_path, analysts=["mallory"], extra={
        "threads": 4, "threads_per_analyst": 2,
        "limits": {"max_epsilon_per_query": 1.0, "timeout": 2, "max_rows": 1000,
                   "queries_per_minute": 100000}})
    server = start_server(tmp_path, config)
    outcomes = []

    def slow() -> None:
        outcomes.append(slow_outcome(server, "mallory"))

    try:
        threads = [threading.Thread(target=slow) for _ in range(3)]
        for t in threads:
            t.start()
            time.sleep(0.3)  # the first two are running in the engine when the third comes
        for t in threads:
            t.join(30)
        assert sorted(outcomes) == ["53300", "57014", "57014"], outcomes
    finally:
        server.stop()


def test_the_http_deadlines_default_to_10_s_30_s_and_64_waiting(tmp_path):
    loaded = load_config(write_config(tmp_path, analysts=["alice"]))
    assert (loaded.http_header_timeout, loaded.http_body_timeout,
            loaded.http_waiting_per_address) == (10, 30, 64)


@pytest.mark.parametrize("key, value", [
    ("http_header_timeout", 0), ("http_body_timeout", -1), ("http_body_timeout", float("inf")),
    ("http_waiting_per_address", 0.5), ("http_header_timeout", "10")])
def test_the_http_deadlines_are_checked(tmp_path, key, value):
    config = write_config(tmp_path, analysts=["alice"])
    _edit(config, lambda raw: raw["security"].update({key: value}))
    with pytest.raises(ServerConfigError, match=f"security.{key} must be a positive"):
        load_config(config)
