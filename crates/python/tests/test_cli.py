"""The choicewise command from the venv's bin/, as pip installs it."""

import json
import pathlib
import subprocess
import sys

import choicewise

BIN = pathlib.Path(sys.executable).parent / "choicewise"


def test_version():
    out = subprocess.run([str(BIN), "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"choicewise {choicewise.__version__}"


def test_replay_json_and_a_usage_error():
    out = subprocess.run([str(BIN), "replay", "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    whole = json.loads(out.stdout)
    assert whole["object"] == "chat.completion" and len(whole["choices"]) == 3
    bad = subprocess.run([str(BIN), "--no-such-flag"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "unexpected argument" in bad.stderr


def test_a_failure_is_one_line_and_status_1(tmp_path):
    missing = tmp_path / "missing.sse"
    out = subprocess.run([str(BIN), "replay", str(missing)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert out.stderr.startswith("choicewise: ")
