"""`dpsql passwd` reads a password on standard input and prints the verifier for the config."""

from __future__ import annotations

import subprocess
import sys

from server_harness import ROOT

from dpsql.server.auth import check_password


def test_passwd_prints_a_verifier_of_the_password():
    out = subprocess.run([sys.executable, "-m", "dpsql.server", "passwd"], cwd=ROOT,
                         input="correct horse\n", capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    verifier = out.stdout.strip()
    assert verifier.startswith("SCRAM-SHA-256$4096:") and "correct horse" not in verifier
    assert check_password(verifier, "correct horse")
    assert not check_password(verifier, "correct horse ")


def test_passwd_refuses_an_empty_password():
    out = subprocess.run([sys.executable, "-m", "dpsql.server", "passwd"], cwd=ROOT,
                         input="\n", capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "empty" in out.stderr
