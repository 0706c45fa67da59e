"""Datasets the service cannot account for are refused when it starts, naming what to change."""

from __future__ import annotations

import pytest
import yaml
from server_harness import write_config

from dpsql.server.config import ConfigError, load_config
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
    with pytest.raises(ConfigError, match=r"datasets\.shop: its metadata names the dataset "
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
    with pytest.raises(ConfigError, match="dpsql serve serves ε-DP \\(Laplace\\) datasets; "
                                          "'visits' uses Gaussian noise"):
        Service(load_config(config))
