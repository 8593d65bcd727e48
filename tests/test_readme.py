"""The README's commands run, in order, from a fresh clone with no `../shared` (issue 13).

The convention (README.md says it too): the lines starting `$ ` in ```console blocks are
commands; a command whose comment says `needs a GPU`, `installs` or `runs the test suite`
is left out here; every other one must exit 0. A line ending in `\\` continues on the next.
```python blocks run too, with the venv's Python.

The fresh clone is a copy of what `git` would commit (tracked files plus untracked files it
does not ignore, so work not yet committed counts), in a temporary folder with nothing beside
it. It reuses the checkout's `.venv` (a link; `make` is told its venv targets are made), so
no package is downloaded: what is checked is the commands and the files a clone has, not
`pip install`.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
SKIP_MARKS = ("needs a GPU", "installs", "runs the test suite")
_FENCE = re.compile(r"^```(\w*)\s*$")


def readme_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block, in order."""
    blocks, lang, body = [], None, []
    for line in text.splitlines():
        fence = _FENCE.match(line.strip()) if line.startswith("```") else None
        if lang is None and fence:
            lang, body = fence.group(1), []
        elif lang is not None and line.startswith("```"):
            blocks.append((lang, "\n".join(body)))
            lang = None
        elif lang is not None:
            body.append(line)
    return blocks


def readme_commands(text: str) -> list[tuple[str, bool]]:
    """(command, runs here) for every `$ ` line of the console blocks, continuations joined."""
    commands = []
    for lang, body in readme_blocks(text):
        if lang != "console":
            continue
        pending = None
        for line in body.splitlines():
            if pending is not None:
                pending += "\n" + line
            elif line.startswith("$ "):
                pending = line[2:]
            else:
                continue  # output shown in the block
            if pending.endswith("\\"):
                continue
            commands.append((pending, not any(mark in pending for mark in SKIP_MARKS)))
            pending = None
    return commands


def test_convention_finds_the_commands():
    commands = readme_commands(README.read_text(encoding="utf-8"))
    run = [c for c, ok in commands if ok]
    assert run[0].split("#")[0].strip() == "make demo"  # the first command a reader meets
    assert [c.split("#")[0].strip() for c, _ in commands[:2]] == ["make demo", "make test"]  # exactly these two lead
    assert any(c.startswith("sitsprof devices") for c, ok in commands if not ok)  # GPU lines are seen, skipped
    assert len(run) >= 20
    assert not [c for c, _ in commands if "../shared" in c or "/work/shared" in c]


def test_python_block_convention():
    assert [lang for lang, _ in readme_blocks("```python\nx = 1\n```\n```sh\nls\n```")] == ["python", "sh"]
    assert readme_commands("```console\n$ a \\\n  b  # needs a GPU\n$ c\nout\n```") == [
        ("a \\\n  b  # needs a GPU", False), ("c", True)]


def _fresh_clone(dest: Path) -> Path:
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():  # a tracked file deleted in the working tree is not in a clone of it
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    (dest / ".venv").symlink_to(ROOT / ".venv")
    return dest


@pytest.mark.slow
def test_readme_commands_run_from_a_fresh_clone(tmp_path):
    clone = _fresh_clone(tmp_path / "sitsprof")
    assert not (tmp_path / "shared").exists()
    env = dict(os.environ, PATH=f"{clone / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    text = (clone / "README.md").read_text(encoding="utf-8")
    ran = 0
    for command, runs_here in readme_commands(text):
        if not runs_here:
            continue
        shell = command
        if command.startswith("make "):  # the venv is the checkout's: its make targets count as made
            shell = "make -o .venv/.installed -o .venv/.installed-dev " + command[len("make "):]
        done = subprocess.run(["bash", "-c", "set -o pipefail\n" + shell], cwd=clone, env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"README command failed ({done.returncode}): {command}\n{done.stderr[-2000:]}"
        ran += 1
    assert ran >= 20
    for lang, body in readme_blocks(text):
        if lang == "python":
            done = subprocess.run([sys.executable, "-c", body], cwd=clone, env=env, capture_output=True, text=True,
                                  timeout=600)
            assert done.returncode == 0, f"README Python block failed:\n{body}\n{done.stderr[-2000:]}"
    # what the commands were said to make, they made
    for made in ("sitsprof-demo/report.html", "sitsprof-demo/calibration.json", "synthetic-report.html",
                 "mrc.json", "costed.json", "work.json"):
        assert (clone / made).is_file(), made


def _readme_table() -> dict[str, list[tuple[float, int]]]:
    """The README's Mooncake table: policy -> [(block hit, P99 ms)] at 1,000 / 10,000 / 50,000."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("### Results on the Mooncake trace"):]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip().strip("*") for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and re.fullmatch(r"0\.\d{4}", cells[1]):
            rows[cells[0]] = [(float(cells[i]), int(cells[i + 1].replace(",", ""))) for i in (1, 3, 5)]
        elif rows and not line.startswith("|"):
            break
    return rows


def test_mooncake_table_is_what_the_command_prints(cli):
    """The README's table equals `policy simulate bundled:mooncake -c 1000,10000,50000` now."""
    table = _readme_table()
    assert len(table) >= 12 and "belady" in table and "sits" in table
    code, out, err = cli("policy", "simulate", "bundled:mooncake", "--capacity", "1000,10000,50000", "--json")
    assert code == 0, err
    got: dict[str, list[tuple[float, int]]] = {}
    for row in json.loads(out)["results"]:
        cost = row["extra"]["cost"]
        got.setdefault(row["policy"], []).append((round(row["block_hit_ratio"], 4), round(cost["ttft_p99_ms"])))
    assert got == table


@pytest.mark.slow
def test_replay_table_is_what_the_command_prints(cli):
    """The README's serving-replay table equals `policy replay bundled:mooncake -p all -c 10%
    --rate-scale 0.25 --allow-oversized-pool --json` now: every policy the replay has, each figure as printed."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("### Serving replay: requests in flight"):]
    table = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 8 and re.fullmatch(r"0\.\d{4}", cells[5]):
            table[cells[0]] = cells[1:]
        elif table and not line.startswith("|"):
            break
    code, out, err = cli("policy", "replay", "bundled:mooncake", "-p", "all", "-c", "10%", "--rate-scale", "0.25",
                         "--allow-oversized-pool", "--json")
    assert code == 0, err
    got = {r["policy"]: [f"{r['ttft_p50_ms'] / 1e3:,.2f}", f"{r['ttft_p99_ms'] / 1e3:,.2f}",
                         f"{r['tokens_per_s']:,.0f}", f"{r['requests_per_s']:.3f}", f"{r['block_hit_ratio']:.4f}",
                         f"{r['prefix_hit_ratio']:.4f}", f"{r['preemptions']:,}"] for r in json.loads(out)["replay"]}
    assert {"lru", "lfu", "lirs"} <= set(got)
    assert table == got
