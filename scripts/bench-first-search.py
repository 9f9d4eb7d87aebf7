"""The first search over a big catalogue, as a person meets it: `tether tools --search` over
BFCL's 1,853 tools (one stdio server, crates/test-support/fixtures/bfcl_server.py), timed from
start to exit, with its peak resident memory.

  cold      a model directory with the encoder's two files and no vector cache: the tools the
            search needs are encoded before the answer (a catalogue over 512 tools is ranked in
            two stages, crates/catalog/src/shortlist.rs: 96 shortlisted and a sample of about
            130; a smaller one has every tool encoded), what the first `tether run` over a new
            server pays
  warm      the same directory again: the vectors come from the cache file
  lexical   `"semanticSearch": false`: no encoder at all (the floor of the command itself)

Rounds are interleaved; each figure is the median with the range. Peak RSS is `wait4`'s
ru_maxrss: the largest process of the command's tree (tether; the Python server is smaller).

usage: python3 scripts/bench-first-search.py TETHER ENCODER_DIR [ROUNDS]
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUERIES = [
    "probability of getting exactly 3 heads in 10 coin tosses",
    "find me a vegan restaurant in Berlin",
    "how many calories in a banana",
]


def run(tether, config, model_dir, query, home):
    """Start to exit and peak RSS (MiB) of one search, through os.wait4."""
    env = dict(os.environ, TETHER_MODEL_DIR=model_dir, XDG_CONFIG_HOME=home, XDG_DATA_HOME=home)
    started = time.monotonic()
    pid = os.posix_spawn(
        tether,
        [tether, "tools", "--config", config, "--search", query, "--limit", "5"],
        env,
        file_actions=[
            (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
            (os.POSIX_SPAWN_OPEN, 2, os.path.join(home, "stderr"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
        ],
    )
    _, status, usage = os.wait4(pid, 0)
    seconds = time.monotonic() - started
    if os.waitstatus_to_exitcode(status) != 0:
        with open(os.path.join(home, "stderr"), errors="replace") as f:
            sys.exit(f"tether tools --search failed: {f.read()}")
    return seconds, usage.ru_maxrss / 1024


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    tether, encoder = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    tools = os.path.join(ROOT, "peers/bfcl/tools.json")
    server = os.path.join(ROOT, "crates/test-support/fixtures/bfcl_server.py")
    for path in (tools, os.path.join(encoder, "model.safetensors"), os.path.join(encoder, "vocab.txt")):
        if not os.path.exists(path):
            sys.exit(f"{path} is missing: run scripts/install-peers.sh and `tether model pull`")
    work = tempfile.mkdtemp(prefix="tether-first-search.")
    try:
        servers = {"bfcl": {"command": "python3", "args": [server, "serve", tools]}}
        configs = {}
        for name, semantic in (("semantic", True), ("lexical", False)):
            configs[name] = os.path.join(work, f"{name}.json")
            with open(configs[name], "w") as f:
                json.dump({"semanticSearch": semantic, "mcpServers": servers}, f)
        results = {"cold": [], "warm": [], "lexical": []}
        for r in range(rounds):
            query = QUERIES[r % len(QUERIES)]
            models = os.path.join(work, f"models-{r}")
            os.makedirs(os.path.join(models, "all-MiniLM-L6-v2"))
            for name in ("model.safetensors", "vocab.txt"):
                os.symlink(os.path.join(encoder, name), os.path.join(models, "all-MiniLM-L6-v2", name))
            home = os.path.join(work, f"home-{r}")
            os.makedirs(home)
            results["lexical"].append(run(tether, configs["lexical"], models, query, home))
            results["cold"].append(run(tether, configs["semantic"], models, query, home))
            results["warm"].append(run(tether, configs["semantic"], models, query, home))
        print(f"first search over BFCL's 1,853 tools (`tether tools --search`, {rounds} rounds, {os.cpu_count()} cores):")
        for name, label in (("cold", "cold (no vector cache)"), ("warm", "warm (vectors cached)"), ("lexical", "lexical (no encoder)")):
            seconds = [s for s, _ in results[name]]
            rss = [m for _, m in results[name]]
            print(
                f"  {label:<26} {statistics.median(seconds):6.2f} s ({min(seconds):.2f}-{max(seconds):.2f}),"
                f" peak RSS {statistics.median(rss):6.1f} MiB ({min(rss):.1f}-{max(rss):.1f})"
            )
        with open("/proc/loadavg") as f:
            print(f"  machine load while measuring: {f.read().strip()}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
